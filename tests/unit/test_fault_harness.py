"""The fault harness tells the known recovery stall from other failures
(bench/faults_harness.py)."""

from __future__ import annotations

from pathlib import Path

from bench.faults_harness import RecoveryStall, recovery_stall

STALL = (
    "[2026-11-28 14:04:30,012] [5344] [WARNING] [^---Recovery]: No event received for "
    "active tp TopicPartition(topic='x-done-changelog', partition=0) since recovery start "
    "(started 5.00 seconds ago)\n"
)


def test_no_stall_line_is_no_stall(tmp_path: Path) -> None:
    (tmp_path / "spare-0.log").write_text("[INFO] Recovery complete\n")
    assert recovery_stall(tmp_path) is None


def test_the_stall_names_its_partitions_and_log(tmp_path: Path) -> None:
    (tmp_path / "spare-0.log").write_text("[INFO] Worker ready\n")
    (tmp_path / "spare-3.log").write_text(STALL * 3)
    stall = recovery_stall(tmp_path)
    assert isinstance(stall, RecoveryStall) and isinstance(stall, AssertionError)
    assert str(stall).endswith(
        "spare-3.log: TopicPartition(topic='x-done-changelog', partition=0)"
    ), str(stall)
