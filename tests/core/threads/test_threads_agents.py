"""The agent registry and its binding key."""

from __future__ import annotations

from typing import Any

import pytest

import threadline
from threadline.app import Application
from threadline.errors import BindingUnavailable
from threadline.threads.agents import binding_registry_key


async def _agent(turn: threadline.Turn) -> Any:
    return None


def _app(*agents: tuple[str, str]) -> Application:
    app = Application()
    for name, version in agents:
        app.agent(name, version=version)(_agent)
    return app


def test_registry_key_depends_on_names_and_versions_only() -> None:
    one = _app(("a", "1"), ("b", "2"))
    same = _app(("b", "2"), ("a", "1"))
    assert one.binding_registry_key == same.binding_registry_key
    assert one.binding_registry_key == binding_registry_key(one.agents)
    assert _app(("a", "1"), ("b", "3")).binding_registry_key != one.binding_registry_key
    assert _app(("a", "1")).binding_registry_key != one.binding_registry_key
    assert _app().binding_registry_key != _app(("a", "1")).binding_registry_key


def test_registration_is_checked() -> None:
    app = _app(("a", "1"))
    with pytest.raises(ValueError, match="already registered"):
        app.agent("a")(_agent)
    with pytest.raises(ValueError):
        app.agent("bad name")(_agent)
    with pytest.raises(TypeError):
        app.agent("sync")(lambda turn: None)  # type: ignore[arg-type]
    with pytest.raises(BindingUnavailable):
        app.agents.resolve("missing")
    assert app.agents.resolve("a").fn is _agent


def test_turn_and_application_are_public() -> None:
    assert "Turn" in threadline.__all__ and "Application" in threadline.__all__
    assert threadline.Turn is threadline.threads.Turn
