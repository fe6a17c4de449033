"""Module-scoped gradient coordinators (starting actors costs seconds) that leave no actor behind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tdscheme.gradient_workers import GradientCoordinator


def alive_actor_ids() -> set[str]:
    from ray._private.state import state  # test-only, as in tests/conftest.py

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}


@pytest.fixture(scope="module")
def coordinators(ray_session) -> Iterator[Callable[..., GradientCoordinator]]:
    """Builds coordinators for a test module; shuts them down and checks no actor is left."""
    before = alive_actor_ids()
    built: list[GradientCoordinator] = []

    def build(make: Callable[[], GradientCoordinator]) -> GradientCoordinator:
        coordinator = make()
        built.append(coordinator)
        return coordinator

    yield build
    for coordinator in built:
        coordinator.shutdown()
    deadline = time.monotonic() + 10.0
    while (left := alive_actor_ids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"gradient worker tests left {len(left)} actor(s) alive"
