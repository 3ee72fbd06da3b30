"""Help that helps: every flag of every command says what it does and, where it has
one, its default; and README names every flag, so its synopsis and `--help` agree."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path

from streams.cli.parser import build_parser
from streams.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def flags(
    parser: argparse.ArgumentParser, command: str = "seine"
) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from flags(sub, name)
        elif action.option_strings:
            yield command, action


def test_every_flag_has_a_help_line() -> None:
    silent = [(cmd, a.option_strings[0]) for cmd, a in flags(build_parser()) if not a.help]
    assert silent == []


def test_every_flag_is_in_the_readme() -> None:
    missing = sorted(
        {
            opt
            for _cmd, action in flags(build_parser())
            for opt in action.option_strings
            if opt.startswith("--") and opt != "--help" and opt not in README
        }
    )
    assert missing == []


def test_defaults_are_shown_from_the_settings() -> None:
    helps = {
        (cmd, action.option_strings[0]): action.help or "" for cmd, action in flags(build_parser())
    }
    assert "(default: 0)" in helps[("crawl", "--delay")]
    assert "(default: 4)" in helps[("crawl", "--partitions")]
    assert "(default: seine-data)" in helps[("crawl", "--data-dir")]
    assert "(default: 20)" in helps[("demo", "--hosts")]
    assert "(default: off)" in helps[("crawl", "--web-port")]
    assert "==SUPPRESS==" not in " ".join(helps.values())


def setting_names(cls: type) -> Iterator[str]:
    """Every field of `cls`, a group's fields in place of the group."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield from setting_names(kind)
        else:
            yield field.name


def test_every_setting_is_in_the_readmes_settings_table() -> None:
    table = README[README.index("| group | fields |") :]
    table = table[: table.index("\n\n")]
    missing = [name for name in setting_names(Settings) if name not in table]
    assert missing == []
