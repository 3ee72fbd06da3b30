"""The content-type handler registry (streams/fetch/handlers.py)."""

from __future__ import annotations

import pytest

from streams.fetch.handlers import (
    DEFAULT_HANDLERS,
    FetchResult,
    HandlerRegistry,
    ResponseView,
    html_handler,
)

# -- handler registry ------------------------------------------------------------------------


async def toy_handler(response: ResponseView, result: FetchResult) -> None:
    result.outcome = "toy"


async def other_handler(response: ResponseView, result: FetchResult) -> None:
    result.outcome = "other"


def test_registry_lookup_order() -> None:
    registry = HandlerRegistry({"image/*": other_handler}, fallback=html_handler)
    registry.register("image/PNG", toy_handler)
    assert registry.lookup("image/png; charset=binary") is toy_handler
    assert registry.lookup("image/gif") is other_handler
    assert registry.lookup("application/pdf") is None
    assert registry.lookup("") is html_handler  # no Content-Type at all: treated as HTML
    assert "image/png" in registry and registry.types() == ["image/*", "image/png"]


def test_registering_twice_needs_replace() -> None:
    registry = HandlerRegistry()
    registry.register("image/png", toy_handler)
    registry.register("image/png", toy_handler)  # the same handler again is harmless
    with pytest.raises(ValueError, match="already has a handler"):
        registry.register("image/png", other_handler)
    registry.register("image/png", other_handler, replace=True)
    assert registry.lookup("image/png") is other_handler
    with pytest.raises(ValueError, match="type/subtype"):
        registry.register("png", toy_handler)


def test_a_copy_leaves_the_default_registry_alone() -> None:
    registry = DEFAULT_HANDLERS.copy()
    registry.register("image/png", toy_handler)
    assert DEFAULT_HANDLERS.lookup("image/png") is None
    assert DEFAULT_HANDLERS.lookup("text/html") is html_handler
    assert registry.lookup("application/xhtml+xml") is html_handler
