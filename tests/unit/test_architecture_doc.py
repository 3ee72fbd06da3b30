"""docs/ARCHITECTURE.md's stage diagram is topology.diagram()'s output, kept current.

The doc holds the block between two marker lines, in a ```text fence. When topology/
changes, regenerate it with

    .venv/bin/python -c 'import topology; print(topology.diagram(), end="")'

and paste the output between the fence lines.
"""

from __future__ import annotations

from pathlib import Path

import topology

DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
BEGIN = "<!-- topology:begin -->"
END = "<!-- topology:end -->"


def doc_block(text: str) -> str:
    """The text between the marker lines, without its fence."""
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "one pair of topology markers"
    inside = text.split(BEGIN, 1)[1].split(END, 1)[0]
    lines = inside.strip("\n").split("\n")
    assert lines[0] == "```text" and lines[-1] == "```", "the block is a ```text fence"
    return "\n".join(lines[1:-1]) + "\n"


def test_the_doc_shows_the_current_topology() -> None:
    expected = topology.diagram()
    assert doc_block(DOC.read_text(encoding="utf-8")) == expected, (
        "docs/ARCHITECTURE.md's topology block differs from topology.diagram(); "
        "paste this between the fence lines:\n" + expected
    )


def test_the_diagram_names_every_stage_and_topic() -> None:
    text = topology.diagram()
    first_words = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert {stage.name for stage in topology.STAGES} <= first_words
    assert {spec.name for spec in (*topology.TOPICS, *topology.SERVICE_TOPICS)} <= first_words


def test_a_changed_block_is_caught() -> None:
    doc = f"x\n{BEGIN}\n```text\n{topology.diagram()}```\n{END}\ny\n"
    assert doc_block(doc) == topology.diagram()
    stale = doc.replace("url-filter", "url-screen", 1)
    assert doc_block(stale) != topology.diagram()
