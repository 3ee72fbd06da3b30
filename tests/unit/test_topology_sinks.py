"""Each stage produces only to the sinks topology/ declares for it, and to each of
them: read from the stage's code (every `out.add(topology.X, ...)`, `out.log(...)`
to crawl-log, `out.add_frontier(...)` to frontier), so a stage that starts sending
somewhere new fails here until topology says so. Dead letters are every stage's
(the agent writes them), so they are left out of both sides."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import topology

ROOT = Path(__file__).resolve().parents[2]

#: Where each stage's step produces (the frontier's requests also leave from the
#: worker's crawl loop when they cannot start where they were dispatched).
MODULES: dict[str, tuple[str, ...]] = {
    "seeds": ("streams/stages/seeds.py",),
    "url-seen": ("streams/stages/url_seen.py",),
    "frontier": ("streams/stages/frontier.py", "streams/runtime/crawl_loop.py"),
    "fetch": ("streams/stages/fetch.py", "streams/stages/documents.py"),
    "parse": ("streams/stages/parse.py",),
    "content-dedup": ("streams/stages/dedup.py",),
    "link-extract": ("streams/stages/link_extract.py", "streams/stages/documents.py"),
    "url-filter": ("streams/stages/url_filter.py",),
    "indexer": ("streams/stages/indexer.py",),
    "anchors": ("streams/stages/anchors.py", "streams/stages/documents.py"),
}


def produced_to(path: Path) -> set[str]:
    """Names of the topology topics the module's outbox calls send to."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method == "log" and "out" in ast.unparse(node.func.value):
            names.add("CRAWL_LOG")
        elif method == "add_frontier":
            names.add("FRONTIER")
        elif method in ("add", "add_record") and node.args:
            first = node.args[0]
            if (
                isinstance(first, ast.Attribute)
                and isinstance(first.value, ast.Name)
                and first.value.id == "topology"
            ):
                names.add(first.attr)
    return names


def declared(stage: topology.StageSpec) -> set[str]:
    by_spec = {
        spec: name for name, spec in vars(topology).items() if isinstance(spec, topology.TopicSpec)
    }
    return {by_spec[sink] for sink in stage.sinks if sink is not topology.DEAD_LETTERS}


def test_every_stage_has_its_modules() -> None:
    assert sorted(MODULES) == sorted(stage.name for stage in topology.STAGES)


@pytest.mark.parametrize("stage", topology.STAGES, ids=lambda stage: stage.name)
def test_a_stage_produces_to_its_declared_sinks(stage: topology.StageSpec) -> None:
    produced: set[str] = set()
    for module in MODULES[stage.name]:
        produced |= produced_to(ROOT / module)
    assert produced == declared(stage), stage.name


def test_the_reader_sees_each_kind_of_send(tmp_path: Path) -> None:
    module = tmp_path / "stage.py"
    module.write_text(
        "def handle(out):\n"
        "    out.add(topology.PARSE, 0, {})\n"
        "    out.log({})\n"
        "    out.add_frontier(0, 'new_urls', {})\n"
        "    log.info('not an outbox')\n",
        encoding="utf-8",
    )
    assert produced_to(module) == {"PARSE", "CRAWL_LOG", "FRONTIER"}
