"""Unit tests for streams.settings: precedence, coercion, --resolve, validation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings, gc_thresholds, load_settings, parse_resolve, worker_count


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "seine.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_with_empty_environment() -> None:
    assert load_settings(environ={}) == Settings()


def test_precedence_defaults_file_env_overrides(tmp_path: Path) -> None:
    config = write_toml(
        tmp_path,
        "[seine]\npartitions = 6\ndelay = 1.5\nmax_depth = 3\nuser_agent = 'FileBot'\n",
    )
    environ = {"SEINE_DELAY": "2.5", "SEINE_MAX_DEPTH": "4"}
    s = load_settings(config, environ=environ, overrides={"max_depth": 5})
    assert s.kafka.partitions == 6  # file over default
    assert s.crawl.delay == 2.5  # env over file
    assert s.crawl.max_depth == 5  # override over env
    assert s.fetch.user_agent == "FileBot"
    assert s.crawl.max_pages == Settings().crawl.max_pages  # untouched default


def test_config_file_without_seine_table_and_with_dashes(tmp_path: Path) -> None:
    config = write_toml(tmp_path, "partitions = 3\nmax-pages = 9\n")
    s = load_settings(config, environ={})
    assert (s.kafka.partitions, s.crawl.max_pages) == (3, 9)


def test_config_file_groups_fields_in_their_tables(tmp_path: Path) -> None:
    config = write_toml(
        tmp_path,
        "[seine]\napp_id = 'grouped'\n[seine.crawl]\ndelay = 1.0\n"
        "[seine.kafka]\npartitions = 5\n[seine.fetch.resolve]\n'a.test' = '127.0.0.1'\n",
    )
    s = load_settings(config, environ={})
    assert (s.app_id, s.crawl.delay, s.kafka.partitions) == ("grouped", 1.0, 5)
    assert s.fetch.resolve == {"a.test": "127.0.0.1"}


def test_settings_are_frozen_and_changed_by_flat_names() -> None:
    s = Settings.of(delay=0.5, bootstrap="127.0.0.1:9092", web_port=7000)
    assert (s.crawl.delay, s.kafka.bootstrap, s.web.web_port) == (0.5, "127.0.0.1:9092", 7000)
    with pytest.raises(AttributeError):
        s.crawl.delay = 1.0  # type: ignore[misc]
    changed = s.with_overrides(max_depth=2, app_id="other")
    assert (changed.crawl.max_depth, changed.app_id, changed.crawl.delay) == (2, "other", 0.5)
    assert s.crawl.max_depth == Settings().crawl.max_depth  # the original is untouched
    with pytest.raises(TypeError, match="no_such"):
        Settings.of(no_such=1)
    assert Settings.of(**s.flat()) == s


def test_config_file_named_by_environment(tmp_path: Path) -> None:
    config = write_toml(tmp_path, "[seine]\npartitions = 11\n")
    assert load_settings(environ={"SEINE_CONFIG": str(config)}).kafka.partitions == 11


def test_none_overrides_do_not_mask_lower_layers() -> None:
    s = load_settings(environ={"SEINE_DELAY": "3"}, overrides={"delay": None, "app_id": "x"})
    assert (s.crawl.delay, s.app_id) == (3.0, "x")


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    config = write_toml(tmp_path, "[seine]\nno_such_setting = 1\n")
    s = load_settings(config, environ={"SEINE_NOPE": "1", "OTHER_PARTITIONS": "9"})
    assert s == Settings()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_bool_coercion(raw: str, expected: bool) -> None:
    assert load_settings(environ={"SEINE_SAME_HOST": raw}).crawl.same_host is expected


def test_bad_bool_names_the_setting() -> None:
    with pytest.raises(ValueError, match="same_host"):
        load_settings(environ={"SEINE_SAME_HOST": "maybe"})


def test_int_and_float_coercion(tmp_path: Path) -> None:
    s = load_settings(
        environ={"SEINE_PARTITIONS": "7", "SEINE_DELAY": "0.25", "SEINE_WEB_ENABLED": "true"}
    )
    assert s.kafka.partitions == 7 and isinstance(s.kafka.partitions, int)
    assert s.crawl.delay == 0.25 and isinstance(s.crawl.delay, float)
    assert s.web.web_enabled is True
    config = write_toml(tmp_path, "[seine]\ndelay = 2\nsame_host = true\n")
    from_file = load_settings(config, environ={})
    assert from_file.crawl.delay == 2.0 and isinstance(from_file.crawl.delay, float)
    assert from_file.crawl.same_host is True
    with pytest.raises(ValueError):
        load_settings(environ={"SEINE_PARTITIONS": "many"})
    with pytest.raises(ValueError):
        load_settings(environ={"SEINE_DELAY": "soon"})


def test_resolve_from_environment() -> None:
    s = load_settings(environ={"SEINE_RESOLVE": "a=1.2.3.4:80,b=5.6.7.8"})
    assert s.fetch.resolve == {"a": "1.2.3.4:80", "b": "5.6.7.8"}
    spaced = load_settings(environ={"SEINE_RESOLVE": " A.Example=1.2.3.4:8080 , b=::1 "})
    assert spaced.fetch.resolve == {"a.example": "1.2.3.4:8080", "b": "::1"}


def test_resolve_from_overrides_and_file(tmp_path: Path) -> None:
    s = load_settings(environ={}, overrides={"resolve": {"Example.COM": "1.2.3.4:80"}})
    assert s.fetch.resolve == {"example.com": "1.2.3.4:80"}  # hosts are matched lower-case
    listed = load_settings(environ={}, overrides={"resolve": ["a=1.1.1.1", "b=2.2.2.2"]})
    assert listed.fetch.resolve == {"a": "1.1.1.1", "b": "2.2.2.2"}
    config = write_toml(tmp_path, '[seine.resolve]\n"WWW.Example.org" = "9.9.9.9"\n')
    assert load_settings(config, environ={}).fetch.resolve == {"www.example.org": "9.9.9.9"}


def test_resolve_does_not_share_the_default_dict() -> None:
    a = load_settings(environ={"SEINE_RESOLVE": "a=1.1.1.1"})
    assert a.fetch.resolve == {"a": "1.1.1.1"}
    assert Settings().fetch.resolve == {}


@pytest.mark.parametrize("item", ["nohost", "=1.2.3.4", "host=", "a=1.2.3.4,broken"])
def test_invalid_resolve_item_raises(item: str) -> None:
    with pytest.raises(ValueError, match="HOST=ADDR"):
        load_settings(environ={"SEINE_RESOLVE": item})


def test_invalid_resolve_mapping_raises() -> None:
    with pytest.raises(ValueError, match="HOST=ADDR"):
        load_settings(environ={}, overrides={"resolve": {"a.example": ""}})


def test_parse_resolve() -> None:
    assert parse_resolve(["Host.Example=10.0.0.1:8443"]) == {"host.example": "10.0.0.1:8443"}
    assert parse_resolve([]) == {}
    with pytest.raises(ValueError, match="got 'x'"):
        parse_resolve(["x"])


@pytest.mark.parametrize("partitions", ["0", "-3"])
def test_partitions_below_one_raise(partitions: str) -> None:
    with pytest.raises(ValueError, match="partitions"):
        load_settings(environ={"SEINE_PARTITIONS": partitions})
    with pytest.raises(ValueError, match="partitions"):
        load_settings(environ={}, overrides={"partitions": int(partitions)})


@pytest.mark.parametrize(
    "text, expected",
    [("", ()), (" ", ()), ("20000,50,100", (20000, 50, 100)), ("5000", (5000,)), ("0", (0,))],
)
def test_gc_thresholds(text: str, expected: tuple[int, ...]) -> None:
    assert gc_thresholds(text) == expected


@pytest.mark.parametrize("text", ["x", "1,2,3,4", "700,-1", "700,,10", "1.5"])
def test_malformed_gc_threshold_fails_when_settings_load(text: str) -> None:
    with pytest.raises(ValueError, match="gc_threshold"):
        load_settings(environ={"SEINE_GC_THRESHOLD": text})


def test_tune_gc_sets_the_thresholds() -> None:
    import gc

    from streams.app import tune_gc

    before = gc.get_threshold()
    try:
        tune_gc(load_settings(environ={"SEINE_GC_THRESHOLD": "12345,6,7"}))
        assert gc.get_threshold() == (12345, 6, 7)
        gc.set_threshold(*before)
        tune_gc(load_settings(environ={"SEINE_GC_THRESHOLD": ""}))
        assert gc.get_threshold() == before  # empty: Python's own thresholds stay
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_nothing_is_read_at_import() -> None:
    # A fresh interpreter, so the import really happens with the variables set.
    code = (
        "from streams.settings import Settings, load_settings\n"
        "print(Settings().kafka.partitions, Settings().app_id, load_settings().kafka.partitions)\n"
    )
    env = {**os.environ, "SEINE_PARTITIONS": "13", "SEINE_APP_ID": "from-env"}
    env.pop("SEINE_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    # Defaults stay defaults; load_settings() reads the environment only when called.
    assert out == ["4", "seine", "13"]


def test_with_overrides_returns_a_copy() -> None:
    base = Settings()
    changed = base.with_overrides(partitions=2, bootstrap="localhost:9092")
    assert (changed.kafka.partitions, changed.kafka.bootstrap) == (2, "localhost:9092")
    assert (base.kafka.partitions, base.kafka.bootstrap) == (4, "")
    assert changed.data_path == Path("seine-data")


def test_each_worker_of_a_crawl_gets_ports_of_its_own(tmp_path: Path) -> None:
    """`seine crawl --workers N --web-port P --redirect-port R`: worker i listens on
    P+i and its redirect process on R+i (one port each could not be bound twice)."""
    from streams.ops.multiworker import settings_env, worker_env

    settings = Settings.of(web_enabled=True, web_port=7000, redirect_port=7100)
    base = settings_env(settings)
    ports = [
        load_settings(environ=worker_env(settings, base, i, tmp_path / str(i), tmp_path / "s"))
        for i in range(3)
    ]
    assert [(s.web.web_port, s.web.redirect_port) for s in ports] == [
        (7000, 7100),
        (7001, 7101),
        (7002, 7102),
    ]
    without = Settings.of(web_enabled=True, web_port=7000)
    env = worker_env(without, settings_env(without), 1, tmp_path, tmp_path / "s")
    assert load_settings(environ=env).web.redirect_port == 0


def test_compression_reaches_the_stage_producer() -> None:
    """SEINE_COMPRESSION picks the stages' codec; librdkafka refuses one it lacks."""
    from confluent_kafka import KafkaException

    from streams.kafka.producer import StageProducer

    assert Settings().kafka.compression == "zstd"
    s = load_settings(environ={"SEINE_COMPRESSION": "lz4"})
    assert s.kafka.compression == "lz4"
    config: dict[str, Any] = {"compression.type": s.kafka.compression}
    StageProducer("127.0.0.1:9", **config).close(0)
    with pytest.raises(KafkaException):
        StageProducer("127.0.0.1:9", **{**config, "compression.type": "brotli"})


@pytest.mark.parametrize(
    ("cores", "partitions", "workers", "expected"),
    [
        (2, 4, 0, 2),  # one per core
        (1, 4, 0, 1),  # one core: one worker, in the crawl's own process
        (16, 4, 0, 4),  # no more than the partitions: a fifth would hold nothing
        (16, 12, 0, 12),
        (2, 4, 3, 3),  # set: as given
    ],
)
def test_the_crawl_runs_one_worker_per_core_up_to_the_partitions(
    cores: int, partitions: int, workers: int, expected: int
) -> None:
    settings = Settings.of(partitions=partitions, workers=workers)
    assert worker_count(settings, cores=cores) == expected


def test_workers_come_from_the_flag_env_or_config_and_must_not_be_negative() -> None:
    assert Settings().workers == 0
    assert load_settings(environ={"SEINE_WORKERS": "1"}).workers == 1
    assert worker_count(Settings.of(workers=1)) == 1
    assert 1 <= worker_count(Settings()) <= Settings().kafka.partitions
    with pytest.raises(ValueError, match="workers must be"):
        load_settings(environ={"SEINE_WORKERS": "-1"})
