"""Fixtures shared by unit test modules.

`hostile`: the hostile catalogue's server (tests/hostile/server.py) as a subprocess, one
per module that asks for it (test_fetch_hostile*.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hostile.server import HostileProcess, start_hostile_process


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileProcess]:
    with start_hostile_process(tmp_path_factory.mktemp("hostile")) as process:
        yield process
