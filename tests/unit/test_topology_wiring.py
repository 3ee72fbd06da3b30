"""The app factory builds what topology/ declares: one agent per stage, named after
it and consuming its source topic, and a setting for each local path it takes.
Built without a broker (nothing connects until the worker runs)."""

from __future__ import annotations

from pathlib import Path

import topology
from streams.app import create_app
from streams.runtime.crawl_loop import CrawlLoop
from streams.settings import GROUP_OF, Settings
from streams.stages import dedup, link_extract, parse, seeds, url_filter, url_seen
from streams.stages.anchors import AnchorsStage
from streams.stages.base import Stage
from streams.stages.fetch import FetchStage
from streams.stages.indexer import IndexerStage


def test_the_app_s_agents_are_topology_s_stages(tmp_path: Path) -> None:
    settings = Settings.of(bootstrap="127.0.0.1:1", data_dir=str(tmp_path), partitions=2)
    seine = create_app(settings)
    try:
        agents = {
            name.rsplit(".", 1)[-1].replace("_", "-"): agent
            for name, agent in seine.app.agents.items()
        }
        crawl_agents = {
            name: agents[name] for name in agents if name in {s.name for s in topology.STAGES}
        }
        assert sorted(crawl_agents) == sorted(stage.name for stage in topology.STAGES)
        for stage in topology.STAGES:
            topics = set(crawl_agents[stage.name].channel.topics)
            assert topics == {topology.topic_name(settings.app_id, stage.source)}, stage.name
    finally:
        seine.store.close()
        seine.ctx.producer.close(timeout=1.0)


def test_every_local_path_joins_two_stages_and_names_a_setting() -> None:
    stages = {stage.name for stage in topology.STAGES}
    fields = set(GROUP_OF)
    for path in topology.LOCAL_PATHS:
        assert {path.source, path.target} <= stages, path
        assert path.setting is None or path.setting in fields, path
        if path.stands_for is not None:
            target = next(s for s in topology.STAGES if s.name == path.target)
            assert target.source == path.stands_for, path


def test_each_stage_class_is_one_stage_of_topology() -> None:
    classes: list[type[Stage]] = [
        seeds.SeedsStage,
        url_seen.UrlSeenStage,
        CrawlLoop,
        FetchStage,
        parse.ParseStage,
        dedup.DedupStage,
        link_extract.LinkExtractStage,
        url_filter.UrlFilterStage,
        IndexerStage,
        AnchorsStage,
    ]
    assert sorted(c.name for c in classes) == sorted(s.name for s in topology.STAGES)
    for c in classes:
        # what the agent reads of a stage (streams.stages.base.Stage)
        assert isinstance(c.decode, bool) and isinstance(c.count_items, bool), c
        assert callable(c.step), c
