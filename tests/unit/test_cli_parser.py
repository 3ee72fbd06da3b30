"""`seine --version`, and numbers that cannot be refused as argument errors."""

from __future__ import annotations

import importlib.metadata

import pytest

from streams.cli.parser import build_parser


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"seine {importlib.metadata.version('seine')}"


@pytest.mark.parametrize(
    ("value", "why"),
    [("0", "0 is not 1 or more"), ("-1", "-1 is not"), ("x", "'x' is not a whole number")],
)
def test_workers_below_one_is_an_argument_error(
    value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["crawl", "http://a.example/", "--workers", value])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and why in err


def test_workers_of_one_or_more_parse() -> None:
    args = build_parser().parse_args(["crawl", "http://a.example/", "--workers", "3"])
    assert args.workers == 3
    # unset: the settings decide (one per core, streams.settings.worker_count)
    assert build_parser().parse_args(["crawl", "http://a.example/"]).workers is None
    assert build_parser().parse_args(["demo", "--workers", "1"]).workers == 1


@pytest.mark.parametrize(
    "flag",
    [
        "--max-host-pages",
        "--max-host-queue",
        "--max-outlinks",
        "--max-url-length",
        "--max-path-depth",
    ],
)
def test_a_negative_budget_is_an_argument_error(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["crawl", "http://a.example/", flag, "-5"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "-5 is not 0 or more" in err
    assert getattr(build_parser().parse_args(["crawl", flag, "0"]), flag[2:].replace("-", "_")) == 0


@pytest.mark.parametrize("flag", ["--delay", "--max-crawl-delay", "--revisit-min"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_negative_or_odd_time_is_an_argument_error(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["crawl", "http://a.example/", flag, value])
    assert done.value.code == 2
    assert flag in capsys.readouterr().err
    assert (
        build_parser().parse_args(["crawl", flag, "0.5"]).__dict__[flag[2:].replace("-", "_")]
        == 0.5
    )
