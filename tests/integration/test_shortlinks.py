"""Short links over HTTP against real workers (`seine worker --web-port`) on the shared broker.

Every rule of short links is exercised from the outside, the way a client sees it, on a
cluster of two workers of one app: each owns some partitions, so requests sent to the
first worker are served by it or forwarded to the second, as in production. Each test
talks from its own loopback source address (127.0.0.x), because the API's rate limit
counts per client address and the tests must not spend each other's tokens. Waits are
on conditions with deadlines: creation and click counting go through Kafka, and a 503
(a rebalance moving partitions, with Retry-After) is retried like a client would.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from streams.core.shortcodes import ALPHABET, CODE_LENGTH, home_partition
from streams.kafka.broker import EmbeddedBroker, free_port
from tests.integration.conftest import REPO, crawl_env

T = TypeVar("T")
#: Settings.kafka.partitions by default: the workers are started without --partitions.
PARTITIONS = 4


class Worker:
    """A `seine worker` subprocess with its web server and its redirect listener on free
    loopback ports."""

    def __init__(self, broker: EmbeddedBroker, data_dir: Path, app_id: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.redirect_port = free_port()
        self.redirect_base = f"http://127.0.0.1:{self.redirect_port}"
        self.log_path = data_dir.with_suffix(".log")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "streams.cli", "worker"),
                *("--bootstrap", broker.bootstrap, "--web-port", str(self.port)),
                *("--redirect-port", str(self.redirect_port)),
                *("--data-dir", str(data_dir)),
            ],
            # Count clicks every second (default 5) so that the test waits less.
            env=crawl_env(app_id, SEINE_LINK_CLICK_WINDOW="1"),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_tail(self) -> str:
        return self.log_path.read_text("utf-8", "replace")[-3000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def client(source_ip: str) -> aiohttp.ClientSession:
    """A session whose requests come from `source_ip` (all of 127/8 is loopback)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(source_ip, 0), limit=0),
        timeout=aiohttp.ClientTimeout(total=20),
    )


def run(coro: Awaitable[T], timeout: float = 40) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def wait_for(
    check: Callable[[], Awaitable[T]], accept: Callable[[T], bool], deadline_s: float
) -> T:
    """Call `check` until `accept(result)` or the deadline; returns the last result."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = await check()
        if accept(result) or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(0.1)  # poll interval; the condition is accept(result)


async def post_once(session: aiohttp.ClientSession, base: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(f"{base}/links", data=data) as r:
        return r.status, await r.json(content_type=None)


async def post(session: aiohttp.ClientSession, base: str, body: Any) -> tuple[int, Any]:
    """POST /links, retrying while the answer is 503 (partitions moving)."""
    return await wait_for(lambda: post_once(session, base, body), lambda r: r[0] != 503, 30)


async def get_once(session: aiohttp.ClientSession, url: str) -> tuple[int, str | None, Any]:
    async with session.get(url, allow_redirects=False) as r:
        body = await r.read()
        payload = json.loads(body) if body else None
        return r.status, r.headers.get("Location"), payload


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str | None, Any]:
    """GET without following redirects, retrying while the answer is 503."""
    return await wait_for(lambda: get_once(session, url), lambda r: r[0] != 503, 30)


async def info_of(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    status, _, info = await get(session, url)
    assert status == 200, info
    result: dict[str, Any] = info
    return result


def counted(n: int) -> Callable[[dict[str, Any]], bool]:
    return lambda info: int(info["clicks"]) >= n


def urls_on_every_partition(per_partition: int, tag: str) -> list[str]:
    """Fresh URLs, `per_partition` of them homed on each partition."""
    wanted = {p: per_partition for p in range(PARTITIONS)}
    urls: list[str] = []
    while any(wanted.values()):
        url = fresh(f"{tag}/{len(urls)}")
        home = home_partition(url, PARTITIONS)
        if wanted[home]:
            wanted[home] -= 1
            urls.append(url)
    return urls


async def wait_settled(workers: list[Worker], deadline_s: float) -> None:
    """Until every worker creates links on every partition: both have joined the group,
    partitions are assigned and tables recovered (before that: refused connections or
    503s)."""
    probes = urls_on_every_partition(1, "ready")
    deadline = time.monotonic() + deadline_s
    async with client("127.0.0.10") as session:
        for w in workers:
            for url in probes:
                while True:
                    assert w.proc.poll() is None, f"worker exited:\n{w.log_tail()}"
                    try:
                        if (await post_once(session, w.base, {"url": url}))[0] == 201:
                            break
                    except (aiohttp.ClientError, OSError):
                        pass
                    if time.monotonic() > deadline:
                        raise AssertionError(f"not settled in {deadline_s}s:\n{w.log_tail()}")
                    await asyncio.sleep(0.2)  # poll interval; the condition is the 201


def fresh(path: str = "") -> str:
    return f"https://site-{uuid.uuid4().hex[:8]}.example/{path}"


@pytest.fixture(scope="module")
def cluster(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Worker]]:
    """Two workers of one app. The second starts once the first has settled: two
    members joining at once made the embedded broker's group go through rebalance
    after rebalance (minutes), one joining a settled group takes one round."""
    app_id = f"links{uuid.uuid4().hex[:8]}"
    data = tmp_path_factory.mktemp("links")
    workers = [Worker(broker, data / "w1", app_id)]
    try:
        run(wait_settled(workers, 60), timeout=70)
        workers.append(Worker(broker, data / "w2", app_id))
        run(wait_settled(workers, 60), timeout=70)
        yield workers
    finally:
        for w in workers:
            w.proc.terminate()
        for w in workers:
            w.stop()


@pytest.fixture
def worker(cluster: list[Worker]) -> Worker:
    """The worker the single-endpoint tests talk to (it forwards what it does not own)."""
    return cluster[0]


def test_create_returns_one_code_per_canonical_url(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.11") as s:
            host = f"site-{uuid.uuid4().hex[:8]}.example"
            status, first = await post(s, worker.base, {"url": f"https://{host}/a/b?q=1"})
            assert status == 201, first
            code = first["code"]
            assert len(code) == CODE_LENGTH and set(code) <= set(ALPHABET)
            assert first["url"] == f"https://{host}/a/b?q=1"
            # Short URLs point at the worker's redirect listener.
            assert first["short_url"] == f"{worker.redirect_base}/s/{code}"
            assert first["created"] is True
            # Another spelling of the same URL: scheme/host case, default port, dot
            # segment, fragment. Same canonical URL, same code, nothing created.
            status, again = await post(
                s, worker.base, {"url": f"HTTPS://{host.upper()}:443/a/./b?q=1#top"}
            )
            assert (status, again["code"], again["created"]) == (201, code, False)
            # A different URL gets a different code.
            status, other = await post(s, worker.base, {"url": f"https://{host}/a/b?q=2"})
            assert status == 201 and other["code"] != code

    run(scenario())


def test_concurrent_creations_of_one_url_agree(worker: Worker) -> None:
    async def scenario() -> None:
        url = fresh("concurrent")
        async with client("127.0.0.12") as s:
            answers = await asyncio.gather(*(post(s, worker.base, {"url": url}) for _ in range(20)))
        assert [status for status, _ in answers] == [201] * 20, answers
        assert len({body["code"] for _, body in answers}) == 1
        assert sum(body["created"] for _, body in answers) == 1

    run(scenario())


def test_redirects_301_302_404(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.13") as s:
            temporary = fresh("temp?x=1")
            _, made = await post(s, worker.base, {"url": temporary})
            assert made["short_url"].startswith(worker.redirect_base)
            path = f"/s/{made['code']}"
            # The same answers from the redirect listener and the web server.
            for base in (worker.redirect_base, worker.base):
                assert await get(s, base + path) == (302, temporary, None)
            permanent = fresh("perm")
            status, made = await post(s, worker.base, {"url": permanent, "permanent": True})
            assert status == 201 and made["permanent"] is True
            for base in (worker.redirect_base, worker.base):
                assert await get(s, f"{base}/s/{made['code']}") == (301, permanent, None)
            # A well-formed code nobody was given, and things that are not codes.
            for base in (worker.redirect_base, worker.base):
                for path in ("/s/zzzzzzz", "/s/abc", "/s/abcdefgh", "/s/abc-def"):
                    status, location, body = await get(s, base + path)
                    assert (status, location) == (404, None), (base, path)
                    assert body == {"error": "unknown code"}
            status, _, body = await get(s, worker.base + "/links/zzzzzzz")
            assert status == 404

    run(scenario())


def test_expired_link_answers_410(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.14") as s:
            url = fresh("soon")
            sent: list[float] = []

            async def create_soon() -> tuple[int, Any]:
                # The expiry is taken anew for each try: a retry after a 503 (a
                # rebalance) must not send a time that has passed meanwhile.
                sent.append(time.time() + 4)
                return await post_once(s, worker.base, {"url": url, "expires_at": sent[-1]})

            status, made = await wait_for(create_soon, lambda r: r[0] != 503, 30)
            expires = sent[-1]
            assert status == 201, made
            assert made["expires_at"] == pytest.approx(expires)
            first = await get(s, made["short_url"])
            if time.time() < expires:  # a loaded machine may take that long to answer
                assert first[0] == 302
            result = await wait_for(lambda: get(s, made["short_url"]), lambda r: r[0] != 302, 15)
            assert result[0] == 410 and result[2] == {"error": "this link has expired"}
            assert time.time() >= expires
            web_route = await get(s, f"{worker.base}/s/{made['code']}")
            assert web_route == (410, None, {"error": "this link has expired"})
            status, _, info = await get(s, f"{worker.base}/links/{made['code']}")
            assert status == 200 and info["expired"] is True
            # ISO-8601 is accepted too, and a time in the past is refused.
            iso = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
            status, made = await post(s, worker.base, {"url": fresh("iso"), "expires_at": iso})
            assert status == 201
            assert made["expires_at"] == pytest.approx(datetime.fromisoformat(iso).timestamp())
            status, body = await post(s, worker.base, {"url": fresh(), "expires_at": 1_000_000})
            assert (status, body) == (400, {"error": "expires_at is in the past"})

    run(scenario())


def test_click_counts_follow_redirects(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.15") as s:
            _, made = await post(s, worker.base, {"url": fresh("clicked")})
            info_url = f"{worker.base}/links/{made['code']}"
            status, _, info = await get(s, info_url)
            assert status == 200 and info["clicks"] == 0 and info["url"] == made["url"]
            assert info["created_at"] == pytest.approx(time.time(), abs=60)
            assert info["expires_at"] is None and info["expired"] is False
            web_route = f"{worker.base}/s/{made['code']}"
            for expected in (5, 8):
                # Clicks count through either way in: the listener and the web server.
                for i in range(expected - info["clicks"]):
                    assert (await get(s, made["short_url"] if i % 2 else web_route))[0] == 302
                # Counting is asynchronous (click events go through a topic).
                info = await wait_for(lambda: info_of(s, info_url), counted(expected), 15)
                assert info["clicks"] == expected

    run(scenario())


BAD_INPUT: list[tuple[bytes | dict[str, Any], str]] = [
    (b"not json", "body is not JSON"),
    (b"", "body is not JSON"),
    (b'["https://example.com/"]', "body must be a JSON object"),
    ({"link": "https://example.com/"}, "missing url"),
    ({"url": 42}, "url must be a string"),
    ({"url": ""}, "url is empty"),
    ({"url": "javascript:alert(1)"}, "javascript: URLs are not allowed"),
    ({"url": " JavaScript:alert(1)"}, "javascript: URLs are not allowed"),
    ({"url": "java\tscript:alert(1)"}, "javascript: URLs are not allowed"),
    ({"url": "data:text/html,<script>alert(1)</script>"}, "data: URLs are not allowed"),
    ({"url": "/relative/path"}, "relative URL"),
    ({"url": "//example.com/x"}, "relative URL"),
    ({"url": "ftp://example.com/x"}, "only http and https URLs are allowed, not ftp:"),
    ({"url": "http://exa mple.com/"}, "malformed URL"),
    ({"url": "https://[::1/"}, "malformed URL"),
    ({"url": "https://example.com/" + "a" * 2029}, "longer than 2048 characters"),
    ({"url": "https://example.com/", "permanent": "yes"}, "permanent must be true or false"),
    (
        {"url": "https://example.com/", "permanent": True, "expires_at": 4_102_444_800},
        "a permanent (301) link cannot expire",
    ),
    ({"url": "https://example.com/", "expires_at": "soon"}, "expires_at is neither"),
]


def test_bad_input_gets_400_with_a_reason(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.16") as s:
            for body, reason in BAD_INPUT:
                status, answer = await post(s, worker.base, body)
                assert status == 400, (body, answer)
                assert reason in answer["error"], (body, answer)
            # 2,048 characters exactly is still fine.
            longest = "https://example.com/" + "a" * 2028
            assert len(longest) == 2048
            assert (await post(s, worker.base, {"url": longest}))[0] == 201

    run(scenario())


def test_rate_limit_answers_429_per_client(worker: Worker) -> None:
    async def scenario() -> None:
        async with client("127.0.0.17") as greedy, client("127.0.0.18") as polite:

            async def bad_post() -> tuple[int, str | None]:
                # Bad input on purpose: the limit is checked before anything else.
                async with greedy.post(f"{worker.base}/links", data=b"x") as r:
                    return r.status, r.headers.get("Retry-After")

            started = time.monotonic()
            answers = await asyncio.gather(*(bad_post() for _ in range(200)))
            elapsed = time.monotonic() - started
            statuses = [status for status, _ in answers]
            assert set(statuses) == {400, 429}, statuses
            # A burst of 60, then 30 per second (the defaults of ShortLinkOptions).
            assert 60 <= statuses.count(400) <= 60 + 30 * elapsed + 1, (statuses, elapsed)
            assert all(int(after or 0) >= 1 for status, after in answers if status == 429)
            # Another client is not affected.
            assert (await post(polite, worker.base, {"url": fresh()}))[0] == 201

    run(scenario())


def test_seine_shorten_prints_a_working_short_url(worker: Worker) -> None:
    url = fresh("from-the-shell?a=1")
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "shorten", url, "--web", worker.base],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    short_url = done.stdout.strip()
    assert short_url.startswith(f"{worker.redirect_base}/s/")

    async def follow() -> tuple[int, str | None, Any]:
        async with client("127.0.0.19") as s:
            return await get(s, short_url)

    assert run(follow()) == (302, url, None)
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams.cli",
            "shorten",
            "javascript:alert(1)",
            "--web",
            worker.base,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert refused.returncode == 1
    assert "400: javascript: URLs are not allowed" in refused.stderr


def test_every_worker_answers_for_every_code(cluster: list[Worker]) -> None:
    """Each worker owns some partitions and forwards the rest to the owner: creating on
    one worker and reading through the other gives the same code and redirect."""
    first, second = cluster

    async def scenario() -> None:
        async with client("127.0.0.21") as s:
            urls = urls_on_every_partition(2, "two")
            made = [await post(s, first.base, {"url": url}) for url in urls]
            assert [status for status, _ in made] == [201] * len(urls), made
            again = [await post(s, second.base, {"url": url}) for url in urls]
            assert [body["code"] for _, body in again] == [body["code"] for _, body in made]
            forwarded: set[tuple[str, str]] = set()
            for (_, body), url in zip(made, urls, strict=True):
                for base in (first.base, second.base, first.redirect_base, second.redirect_base):
                    async with s.get(f"{base}/s/{body['code']}", allow_redirects=False) as r:
                        assert (r.status, r.headers.get("Location")) == (302, url)
                        owner = r.headers.get("X-Seine-Served-By")
                        if owner is not None:
                            forwarded.add((base, owner))
            # Every partition has codes, and each worker owns some partitions: so each
            # worker forwarded to the other (its web server), from both ways in. A
            # redirect listener (a process beside its worker, reading the worker's
            # tables) answers its worker's codes itself: it never asks its own worker.
            assert forwarded == {
                (first.base, second.base),
                (second.base, first.base),
                (first.redirect_base, second.base),
                (second.redirect_base, first.base),
            }

    run(scenario())


def redirect_processes(worker: Worker) -> list[int]:
    """Process ids of the worker's redirect process(es), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == worker.proc.pid and b"streams.web.redirect_process" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_killed_redirect_process_is_started_again(worker: Worker) -> None:
    """The worker supervises its redirect process: killed, it is back within seconds
    and answers short URLs again (the last test of the module: it kills a process)."""
    before = redirect_processes(worker)
    assert len(before) == 1, before
    os.kill(before[0], signal.SIGKILL)

    async def scenario() -> tuple[int, str | None, Any]:
        async with client("127.0.0.22") as s:
            url = fresh("again")
            _, made = await post(s, worker.base, {"url": url})

            async def follow() -> tuple[int, str | None, Any]:
                try:
                    return await get_once(s, made["short_url"])
                except (aiohttp.ClientError, OSError):
                    return 0, None, None  # not listening again yet

            result = await wait_for(follow, lambda r: r[0] == 302, 20)
            assert result[1] == url
            return result

    run(scenario())
    after = redirect_processes(worker)
    assert len(after) == 1 and after != before, (before, after)
    assert worker.proc.poll() is None
