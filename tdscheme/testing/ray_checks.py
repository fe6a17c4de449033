"""Ray housekeeping for tests: the actors alive, none left behind, an actor killed and gone."""

from __future__ import annotations

import time
from typing import Any


def actor_ids() -> set[str]:
    """The ids of every Ray actor this cluster has had, dead ones included."""
    from ray._private.state import state

    return set(state.actor_table(None))


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


def prestart_workers(num_workers: int = 2, keep_alive_s: int = 60) -> None:
    """Asks this node's raylet to start ``num_workers`` idle Python workers for this driver's job.

    An actor created later takes an idle worker at once instead of waiting for a new process
    to import torch, tensordict and torchrl (the workers of a tdscheme Ray preload them):
    about 0.3 s instead of 4-7 s on a 2-core machine. Ray starts such workers itself only
    when it starts (one per CPU); a test suite that creates and kills actors test after test
    asks again after each test. Idle workers hold no resources; past ``keep_alive_s`` Ray
    may stop them. Uses the raylet's ``PrestartWorkers`` call (test-only use of Ray's
    private modules, as :func:`alive_actor_ids`).
    """
    import ray
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    node = ray._private.worker.global_worker.node
    channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
    try:
        request = node_manager_pb2.PrestartWorkersRequest(
            language=common_pb2.PYTHON,
            job_id=bytes.fromhex(ray.get_runtime_context().get_job_id()),
            keep_alive_duration_secs=keep_alive_s,
            num_workers=num_workers,
        )
        node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=10)
    finally:
        channel.close()
