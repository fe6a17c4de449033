"""Module-scoped gradient coordinators (starting actors costs seconds) that leave no actor behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tdscheme.gradient_workers import GradientCoordinator
from tdscheme.testing import alive_actor_ids, assert_no_actors_left


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
    assert_no_actors_left(before, what="gradient worker tests")
