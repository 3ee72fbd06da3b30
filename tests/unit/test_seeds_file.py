"""--seeds-file: seeds one a line, and a file that cannot be read named in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streams.cli import main
from streams.cli.crawl import _read_seeds


def seeds(urls: list[str], path: Path | None) -> list[str]:
    return _read_seeds(argparse.Namespace(urls=urls, seeds_file=str(path) if path else None))


def test_seeds_come_from_arguments_and_the_file(tmp_path: Path) -> None:
    file = tmp_path / "seeds.txt"
    file.write_text("# a comment\nhttp://b.example/\n\n   http://c.example/  \n")
    assert seeds(["http://a.example/"], file) == [
        "http://a.example/",
        "http://b.example/",
        "http://c.example/",
    ]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(ValueError, match=f"cannot read the seeds file {missing}: No such file"):
        seeds([], missing)


def test_a_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    file = tmp_path / "seeds.txt"
    file.write_bytes(b"http://a.example/\nhttp://b.example/\xff\n")
    with pytest.raises(
        ValueError, match=r"seeds.txt, line 2: not UTF-8 \(byte 0xff at column 18\)"
    ):
        seeds([], file)


def test_the_command_says_it_in_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["crawl", "--seeds-file", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.txt" in err and "Traceback" not in err
