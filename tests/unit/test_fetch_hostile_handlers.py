"""The Fetcher against the hostile catalogue: request headers, content handlers, and the
catalogue itself (see test_fetch_hostile.py)."""

from __future__ import annotations

import json
from typing import Any

from streams.core import decode
from streams.core.parsing import parse_html
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import DEFAULT_HANDLERS, FetchResult, ResponseView, register_handler
from tests.hostile import server as hs
from tests.hostile.server import HostileProcess
from tests.hostile.toy_png import handle_png
from tests.unit.hostile_helpers import (
    UA,
    connection_spy,
    make_config,
    run,
)

# -- request headers ------------------------------------------------------------------------


def test_user_agent_and_accept_encoding_are_sent(hostile: HostileProcess) -> None:
    config = make_config(hostile, ["echo.hostile.test"])

    async def go() -> FetchResult:
        fetcher = Fetcher(config)
        try:
            return await fetcher.fetch(f"http://echo.hostile.test:{hostile.port}/echo-headers")
        finally:
            await fetcher.close()

    with connection_spy():
        result = run(go)
    sent = json.loads(result.body)
    assert sent["user-agent"] == UA
    assert sent["accept-encoding"] == decode.accept_encoding()
    assert sent["host"] == f"echo.hostile.test:{hostile.port}"


# -- handlers --------------------------------------------------------------------------------------


def fetch_one(hp: HostileProcess, path: str, **kw: Any) -> FetchResult:
    config = make_config(hp, ["handler.hostile.test"])

    async def go() -> FetchResult:
        fetcher = Fetcher(config, **kw)
        try:
            return await fetcher.fetch(f"http://handler.hostile.test:{hp.port}{path}")
        finally:
            await fetcher.close()

    with connection_spy():
        return run(go)


def test_a_toy_png_handler_is_one_registration(hostile: HostileProcess) -> None:
    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", handle_png)  # the one line
    r = fetch_one(hostile, "/type/png", handlers=registry)
    assert (r.outcome, r.reason, r.status) == ("image", "png 3x2", 200)
    assert r.wire_bytes <= 65536  # it asked for 24 bytes, the fetcher read one chunk at most
    # the default registry still refuses PNGs
    assert fetch_one(hostile, "/type/png").outcome == "not-html"


def test_register_handler_reaches_the_default_fetcher(hostile: HostileProcess) -> None:
    async def handle_json(response: ResponseView, result: FetchResult) -> None:
        body = await response.read(1024)
        result.outcome, result.body = "json", body.data
        result.reason = f"{len(json.loads(body.data)['items'])} items"

    register_handler("application/json", handle_json)
    try:
        r = fetch_one(hostile, "/type/json")
    finally:
        DEFAULT_HANDLERS.unregister("application/json")
    assert (r.outcome, r.reason, r.body) == ("json", "3 items", hs.JSON_BODY)


def test_a_handler_that_skips_the_body_never_reads_it(hostile: HostileProcess) -> None:
    async def count_only(response: ResponseView, result: FetchResult) -> None:
        result.outcome, result.reason = "skipped", response.mime

    registry = DEFAULT_HANDLERS.copy()
    registry.register("application/*", count_only)
    r = fetch_one(hostile, "/type/pdf", handlers=registry)  # an endless body
    assert (r.outcome, r.reason, r.wire_bytes) == ("skipped", "application/pdf", 0)


def test_a_broken_handler_becomes_an_error_result(hostile: HostileProcess) -> None:
    async def twice(response: ResponseView, result: FetchResult) -> None:
        await response.read()
        await response.read()

    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", twice)
    r = fetch_one(hostile, "/type/png", handlers=registry)
    assert r.outcome == "error" and r.reason == "unexpected RuntimeError: the body can be read once"


def test_the_catalogue_is_served(hostile: HostileProcess) -> None:
    """Every endpoint in the index is reachable (a broken catalogue would test nothing)."""
    r = fetch_one(hostile, "/")
    links = parse_html(r.body).links
    assert set(links) == {p for p in hs._ROUTES if p != "/" and p not in hs.LEAVES_LOOPBACK}
    assert not set(links) & hs.LEAVES_LOOPBACK
