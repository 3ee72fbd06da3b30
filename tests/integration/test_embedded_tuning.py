"""What `seine crawl` changes when it runs its own broker, and what it leaves alone."""

from __future__ import annotations

from pathlib import Path

from streams.cli import EMBEDDED_GROUP_TIMEOUTS, broker_for
from streams.settings import Settings, load_settings


def test_embedded_broker_drops_standbys_unless_asked(tmp_path: Path) -> None:
    """Workers of an embedded broker share one machine: a standby only doubles table work."""
    assert Settings().standby_replicas == 1  # a cluster keeps Faust's warm copies
    assert EMBEDDED_GROUP_TIMEOUTS["standby_replicas"] == 0
    plain = load_settings(environ={}, overrides={"data_dir": str(tmp_path / "a")})
    asked = load_settings(
        environ={"SEINE_STANDBY_REPLICAS": "2"}, overrides={"data_dir": str(tmp_path / "b")}
    )
    with broker_for(plain) as effective:
        assert effective.bootstrap
        assert effective.standby_replicas == 0
        assert effective.session_timeout == EMBEDDED_GROUP_TIMEOUTS["session_timeout"]
    with broker_for(asked) as effective:
        assert effective.standby_replicas == 2
