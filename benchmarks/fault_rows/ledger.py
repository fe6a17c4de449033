"""Fault rows of issue 12, section 2: the frame ledger (what was asked, collected and yielded).

Each row is a function returning the dict ``benchmarks/faults.py`` records; it runs
real collection through a fault that held before (a worker killed, an env that
exits, a slow worker preempted, stale batches dropped, writes into a Ray-held
buffer, a small object store) or a budget (``total_frames`` that is no multiple of a
batch, trajectory ids after a restart) and checks the frame ledger (see
``liveness.py``). Heavy imports stay inside the functions.

Run this module's rows without the table runner (one Ray for all, in this process)::

    .venv/bin/python benchmarks/fault_rows/ledger.py [substring]
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ holds faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults import row  # noqa: E402

from fault_rows._parts import (  # noqa: E402
    cartpole_preset,
    collect_row,
    ledger_state,
    ledger_text,
    ray_lease,
    run_rows_here,
)

#: the runner's hard limit per row: the bounds plus Ray's start on a loaded machine
TIMEOUT_S = 420.0


# -- the ledger under the faults that already held ---------------------------------------


def ledger_worker_sigkill() -> dict[str, Any]:
    import ray

    def kill_once(collector: Any, i: int) -> None:
        if i == 2:
            ray.kill(collector.workers[0], no_restart=True)

    def restarted(stats: dict[str, Any]) -> str:
        return "" if stats["restarts"] == 1 else f"restarts={stats['restarts']}"

    return collect_row(
        "a worker SIGKILLed mid-run (ray.kill)", 240.0, total_frames=600, frames_per_batch=40,
        num_collectors=2, during=kill_once, check=restarted,
    )  # fmt: skip


def ledger_env_crash() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    return collect_row(
        "an env exits its process every 150 steps", 240.0, total_frames=600, frames_per_batch=40,
        create_env_fn=[functools.partial(make_faulty_env, exit_at_step=150), make_faulty_env], max_restarts=5,
        check=lambda s: "" if s["ledger"]["lost"] > 0 else "no frame counted lost",
    )  # fmt: skip


def ledger_preemption() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    return collect_row(
        "a slow worker preempted (stacked)", 240.0, total_frames=400, frames_per_batch=80,
        create_env_fn=[make_faulty_env, functools.partial(make_faulty_env, sleep_s=0.02)], sync=True,
        preemption={"fraction_workers": 0.5, "fraction_samples": 0.5},
        check=lambda s: "" if s["ledger"]["preempted"] > 0 else "nothing preempted",
    )  # fmt: skip


def ledger_lag_drop() -> dict[str, Any]:
    def push(collector: Any, i: int) -> None:
        collector.update_policy_weights_()

    return collect_row(
        "stale batches dropped (max_policy_lag=0, prefetch 1, a push per batch)", 240.0,
        total_frames=400, frames_per_batch=40, policy=cartpole_preset(hidden=64).policy_factory()()["actor"], max_policy_lag=0,
        prefetch_batches=1, during=push,
        check=lambda s: "" if s["ledger"]["dropped"] > 0 else "nothing dropped",
    )  # fmt: skip


def _ray_buffer(capacity: int) -> Any:
    """A torchrl Ray-held replay buffer of ``capacity`` frames (its actor takes no CPU)."""
    from torchrl.data import LazyTensorStorage, RayReplayBuffer

    return RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, capacity), batch_size=32,
        remote_config={"num_cpus": 0},
    )  # fmt: skip


def ledger_background_writes() -> dict[str, Any]:
    buffer = _ray_buffer(10_000)
    try:
        return collect_row(
            "workers write into a Ray-held buffer, total_frames=500", 240.0, total_frames=500,
            frames_per_batch=200, num_collectors=2, replay_buffer=buffer,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            buffer.shutdown()


# -- total_frames exact ----------------------------------------------------------------------


def total_frames_exact_first_ready() -> dict[str, Any]:
    return collect_row(
        "total_frames=500, frames_per_batch=200 (first-ready)", 240.0, total_frames=500,
        frames_per_batch=200, num_collectors=2,
    )  # fmt: skip


def total_frames_exact_stacked() -> dict[str, Any]:
    return collect_row(
        "total_frames=500, frames_per_batch=200 (stacked)", 240.0, total_frames=500,
        frames_per_batch=200, num_collectors=2, sync=True,
    )  # fmt: skip


def total_frames_under_one_batch() -> dict[str, Any]:
    return collect_row(
        "total_frames=50, frames_per_batch=200", 240.0, total_frames=50, frames_per_batch=200,
        num_collectors=2,
    )  # fmt: skip


def traj_ids_not_spliced_after_restart() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.keys import WORKER_ID_KEY

    last: dict[int, int] = {}
    spliced = 0
    with (
        ray_lease(),
        RayCollector(make_faulty_env, frames_per_batch=40, total_frames=400, seed=0) as coll,
    ):
        start = time.perf_counter()
        for i, batch in enumerate(coll):
            ids = batch.get(("collector", "traj_ids"))
            worker = int(batch.get(WORKER_ID_KEY).reshape(-1)[0])
            valid = ids[ids >= 0]
            if worker in last and int(valid.min()) < last[worker]:
                spliced += 1
            last[worker] = int(valid.max())
            if i == 3:
                ray.kill(coll.workers[0], no_restart=True)
        stats = coll.stats(timeout=5)
    outcome = "survived" if spliced == 0 and stats["restarts"] == 1 else "wrong result"
    return row(
        "trajectory ids after a restart (no splicing)", outcome, time.perf_counter() - start,
        240.0, ledger=ledger_state(stats, 400), detail=f"{spliced} batches reused old ids",
    )  # fmt: skip


def traj_ids_not_spliced_in_a_ray_held_buffer() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.keys import WORKER_ID_KEY

    fault = "trajectory ids after a restart, workers writing into a Ray-held buffer"
    with ray_lease():
        buffer = _ray_buffer(20_000)
        try:
            with RayCollector(
                make_faulty_env, frames_per_batch=100, total_frames=10_000, num_collectors=2,
                replay_buffer=buffer, seed=0, remote_configs={"num_cpus": 0.5},
            ) as collector:  # fmt: skip
                start = time.perf_counter()
                collector.start()
                while buffer.write_count < 300:
                    time.sleep(0.05)
                ray.kill(collector.workers[0], no_restart=True)
                while collector.is_running:
                    time.sleep(0.1)
                stats = collector.stats(timeout=10)
            data = buffer[:]
        finally:
            with contextlib.suppress(Exception):
                buffer.shutdown()
    pieces = 0  # trajectory ids of a worker written in more than one block
    for worker in data[WORKER_ID_KEY].unique().tolist():
        ids = data[data[WORKER_ID_KEY] == worker]["collector", "traj_ids"].flatten()
        for traj in ids.unique().tolist():
            where = (ids == traj).nonzero().flatten()
            pieces += int(where[-1] - where[0] + 1 != where.numel())
    ok = pieces == 0 and stats["restarts"] == 1
    return row(
        fault, "survived" if ok else "wrong result", time.perf_counter() - start, 240.0,
        ledger=ledger_state(stats, len(data)),
        detail=f"{pieces} trajectory ids written in pieces, restarts={stats['restarts']}",
    )  # fmt: skip


def object_store_pressure() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    start = time.perf_counter()
    bound_s = 180.0
    if ray.is_initialized():
        return row("object store pressure", "wrong result", 0.0, bound_s, detail="Ray running")
    ray.init(num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False)
    try:
        env = functools.partial(make_faulty_env, obs_shape=(4, 84, 84))  # 28 KB a frame, x2 (next)
        with RayCollector(
            env, frames_per_batch=1000, total_frames=6000, num_collectors=2, seed=0
        ) as collector:  # ~56 MB batches through an 80 MiB object store
            received = sum(batch.numel() for batch in collector)
            stats = collector.stats(timeout=5)
    except Exception as err:  # noqa: BLE001
        detail = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        return row("object store pressure", "wrong result", time.perf_counter() - start,
                    bound_s, detail=detail)  # fmt: skip
    finally:
        ray.shutdown()
    outcome = "survived" if received == 6000 else "wrong result"
    return row(
        "56 MB batches through an 80 MiB object store", outcome, time.perf_counter() - start,
        bound_s, ledger=ledger_state(stats, received), detail=ledger_text(stats),
    )  # fmt: skip


ROWS: list[tuple[str, Callable[[], dict]]] = [
    (fn.__name__, fn)
    for fn in (
        ledger_worker_sigkill,
        ledger_env_crash,
        ledger_preemption,
        ledger_lag_drop,
        ledger_background_writes,
        total_frames_exact_first_ready,
        total_frames_exact_stacked,
        total_frames_under_one_batch,
        traj_ids_not_spliced_after_restart,
        traj_ids_not_spliced_in_a_ray_held_buffer,
        object_store_pressure,
    )
]


if __name__ == "__main__":
    run_rows_here(ROWS)
