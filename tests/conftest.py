"""One real Ray per test session (num_cpus=2, no dashboard), reused by every test."""

from __future__ import annotations

import time

import pytest
import ray

from tdscheme.runtime import local_ray_config


@pytest.fixture(scope="session")
def ray_session():
    """Starts Ray once for the whole session; tdscheme joins it and never shuts it down.

    It is the local Ray tdscheme would start (worker processes preload torchrl), on 2 CPUs.
    """
    started = not ray.is_initialized()
    if started:
        ray.init(**{**local_ray_config(), "num_cpus": 2, "log_to_driver": False})
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def ray_clean(ray_session):
    """Like ``ray_session``, and fails the test if it leaves actors alive."""
    before = _alive_actor_ids()
    yield ray_session
    deadline = time.monotonic() + 10.0  # ray.kill is asynchronous
    while (left := _alive_actor_ids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"test left {len(left)} Ray actor(s) alive: {sorted(left)}"


def _alive_actor_ids() -> set[str]:
    # ray.util.state needs the dashboard, which the test Ray does not run; the GCS
    # actor table is the same information (test-only use of a private module).
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}
