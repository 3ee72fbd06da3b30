"""A crashed worker says what crashed in one line and keeps the traceback on disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streams.app import report_crash
from streams.settings import Settings


def _raise_key_error() -> None:
    empty: dict[str, int] = {}
    empty["missing"] += 1


def test_a_crash_is_one_line_and_its_traceback_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        _raise_key_error()
    except KeyError as exc:
        with caplog.at_level(logging.ERROR):
            report_crash(Settings.of(data_dir=str(tmp_path / "data")), exc)
    crash_log = tmp_path / "data" / "crash.log"
    assert [r.getMessage() for r in caplog.records] == [
        f"worker crashed: KeyError('missing') (traceback in {crash_log})"
    ]
    kept = crash_log.read_text()
    assert kept.startswith("Traceback") and "_raise_key_error" in kept


def test_an_unwritable_data_dir_still_gives_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.ERROR):
        report_crash(Settings.of(data_dir=str(blocker / "data")), RuntimeError("boom"))
    assert [r.getMessage() for r in caplog.records] == ["worker crashed: RuntimeError('boom')"]
