"""streams/core/allocator.py: the worker's arena cap and malloc_trim (glibc only)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from streams.core import allocator


def test_zero_arenas_keeps_glibcs_default() -> None:
    assert allocator.limit_arenas(0) is False


def test_arenas_are_capped_where_malloc_is_glibcs() -> None:
    assert allocator.limit_arenas(8) is (allocator._glibc() is not None)


def test_trim_hands_free_pages_back_and_says_how_long_it_took() -> None:
    junk = [bytearray(1 << 16) for _ in range(256)]  # 16 MB from malloc, then freed
    del junk
    took = allocator.trim()
    assert took >= 0.0
    assert (took > 0.0) is (allocator._glibc() is not None)


def test_a_worker_caps_its_arenas_before_its_first_broker_client(monkeypatch: Any) -> None:
    # An arena made before the cap stays: broker_for's admin client starts
    # librdkafka's threads, so the cap must come first (at peak, a dense-web
    # worker held 6 arenas with a cap of 2 when the app set it).
    from streams.settings import load_settings

    # the module (streams.cli exports a function of the same name)
    crawl = importlib.import_module("streams.cli.crawl")

    calls: list[str] = []

    class Stop(Exception):
        pass

    def broker_for(settings: Any, **_: Any) -> Any:
        calls.append("broker_for")
        raise Stop

    monkeypatch.setattr(allocator, "limit_arenas", lambda n: calls.append(f"limit {n}"))
    monkeypatch.setattr(crawl, "broker_for", broker_for)
    settings = load_settings(environ={})
    with pytest.raises(Stop):
        crawl.run_crawl(settings, [], until_idle=True)
    assert calls == [f"limit {settings.worker.malloc_arenas}", "broker_for"]
