"""Every command, given bad input, says so in one line and exits non-zero: never a
traceback. Each case runs `seine` as a user does, in a fresh process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.conftest import crawl_env, run_seine


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cases(tmp: Path, nobody: str) -> dict[str, list[str]]:
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    bad_seeds = tmp / "bad-seeds.txt"
    bad_seeds.write_bytes(b"http://a.test/\n\xff\xfe\n")
    return {
        "crawl: not a URL": ["crawl", "not-a-url"],
        "crawl: ftp": ["crawl", "ftp://x/"],
        "crawl: loopback": ["crawl", "http://127.0.0.1:9/"],
        "crawl: no seeds file": ["crawl", "--seeds-file", str(tmp / "nope.txt")],
        "crawl: non-UTF-8 seeds file": ["crawl", "--seeds-file", str(bad_seeds)],
        "crawl: zero workers": ["crawl", "http://a.test/", "--workers", "0"],
        "crawl: negative delay": ["crawl", "http://a.test/", "--delay", "-1"],
        "crawl: no broker there": ["crawl", "http://a.test/", "--bootstrap", nobody],
        "worker: no bootstrap": ["worker", "--data-dir", str(empty)],
        "seed: not a URL": ["seed", "not a url", "--bootstrap", nobody],
        "seed: no broker there": ["seed", "http://a.test/", "--bootstrap", nobody],
        "get: no store": ["get", "http://a.test/", "--data-dir", str(tmp / "none")],
        "pages: no store": ["pages", "--data-dir", str(tmp / "none")],
        "export: no store": ["export", "--cdxj", "--data-dir", str(tmp / "none")],
        "export: hosts without links": ["export", "--cdxj", "--hosts", "--data-dir", str(empty)],
        "search: no index": ["search", "zebra", "--data-dir", str(tmp / "none")],
        "shorten: no web server": ["shorten", "http://a.test/", "--web", f"http://{nobody}"],
        "status: no crawl log": ["status", "--data-dir", str(empty)],
        "status: no broker there": ["status", "--bootstrap", nobody],
        "replay: no broker there": ["replay", "--bootstrap", nobody, "--since", "1h ago"],
        "demo: not a demo's dir": ["demo", "--data-dir", str(tmp / "taken")],
        "no command": [],
    }


@pytest.mark.parametrize("name", sorted(cases(Path("/tmp"), "x")))
def test_bad_input_is_one_line_and_no_traceback(tmp_path: Path, name: str) -> None:
    taken = tmp_path / "taken" / "pages"
    taken.mkdir(parents=True)
    args = cases(tmp_path, f"127.0.0.1:{_closed_port()}")[name]
    done = run_seine(args, env=crawl_env(f"bad{abs(hash(name)) % 10**8}"), timeout=90)
    assert done.returncode != 0, (name, done.stdout[-1000:], done.stderr[-1000:])
    assert "Traceback" not in done.stderr + done.stdout, (name, done.stderr[-3000:])
    # argparse's usage block (its first line "usage:", the rest indented) is not
    # the error; what is left is the error itself, or the refusals and a verdict
    lines = [
        ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))
    ]
    assert lines, name
    assert len(lines) <= 4, (name, lines[:10])
