"""Ray housekeeping for tests: the actors alive, none left behind, an actor killed and gone."""

from __future__ import annotations

import time
from typing import Any


def alive_actor_ids() -> set[str]:
    """The ids of the Ray actors that are not dead (needs a connected Ray)."""
    # ray.util.state needs the dashboard, which a test Ray does not run; the GCS actor
    # table is the same information (test-only use of a private module).
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}


def assert_no_actors_left(before: set[str], *, timeout_s: float = 10.0, what: str = "test") -> None:
    """Waits up to ``timeout_s`` (``ray.kill`` is asynchronous) for actors not in ``before`` to die.

    Raises:
        AssertionError: some actor created since ``before`` is still alive.
    """
    deadline = time.monotonic() + timeout_s
    while (left := alive_actor_ids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"{what} left {len(left)} Ray actor(s) alive: {sorted(left)}"


def kill_and_wait(actor: Any, timeout_s: float = 30.0) -> None:
    """``ray.kill(actor)``, then waits until the actor is gone.

    ``ray.kill`` returns before the actor is dead: a call made at once may still be
    served. This pings the actor until Ray reports it dead.

    Raises:
        AssertionError: the actor still answers ``timeout_s`` after the kill.
    """
    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_call__.remote(lambda _: None), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the actor still answers {timeout_s:g} s after ray.kill")
