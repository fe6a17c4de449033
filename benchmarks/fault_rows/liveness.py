"""Fault rows of issue 12, section 1: liveness (hung and dying workers, restarts, elastic workers).

Each row is a function returning the dict ``benchmarks/faults.py`` records; it runs
one real fault (a real Ray, real CartPole collection: an env that hangs, a worker's
process frozen, a worker that dies after every restart, a gradient worker that hangs
or gives non-finite numbers) and checks the frame ledger (``balanced``: every
request's resolution added up to what it asked, nothing unaccounted;
``collected == yielded + dropped + preempted + lost + discarded``; nothing left in
flight; and ``yielded`` equal to the frames the loop received). Heavy imports stay
inside the functions.

Run this module's rows without the table runner (one Ray for all, in this process)::

    .venv/bin/python benchmarks/fault_rows/liveness.py [substring]
"""

from __future__ import annotations

import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ holds faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults import row  # noqa: E402
from harness import actor_pid  # noqa: E402

from fault_rows._parts import cartpole_preset, collect_row, ray_lease, run_rows_here  # noqa: E402

#: the runner's hard limit per row: the bounds plus Ray's start on a loaded machine
TIMEOUT_S = 420.0


# -- hung workers ---------------------------------------------------------------------------


def _hang_env(tmp: str) -> Callable[[], Any]:
    from tdscheme.envs import make_faulty_env

    return functools.partial(make_faulty_env, hang_at_step=45, once_path=f"{tmp}/hung")


def _hung_once(stats: dict[str, Any]) -> str:
    wrong = []
    if stats["workers_hung"] != 1:
        wrong.append(f"workers_hung={stats['workers_hung']}")
    if stats["ledger"]["lost"] <= 0:
        wrong.append("no frame counted lost")
    return ", ".join(wrong)


def hung_worker_first_ready() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return collect_row(
            "an env hangs (first-ready, worker_stall_timeout_s=5)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2,
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def hung_worker_hangs_again_first_ready() -> dict[str, Any]:
    """Issue 38's case: one of two workers' envs hangs after 150 steps at every build; the
    budget is reached on the healthy worker within ``worker_stall_timeout_s`` + 30 s."""
    from tdscheme.envs import make_faulty_env

    stall_s = 10.0
    healthy = functools.partial(make_faulty_env, sleep_s=0.002)
    hangs = functools.partial(make_faulty_env, sleep_s=0.002, hang_at_step=150)

    def check(stats: dict[str, Any]) -> str:
        frames = stats["frames_per_worker"]
        wrong = [] if frames[0] > frames[1] else [f"frames per worker {frames}"]
        if not 1 <= stats["restarts_per_worker"][1] <= 2:
            wrong.append(f"restarts per worker {stats['restarts_per_worker']}")
        return ", ".join(wrong)

    return collect_row(
        "an env hangs at every build of one worker (first-ready, worker_stall_timeout_s=10, "
        "max_restarts=2): the healthy worker finishes the budget", stall_s + 30.0,
        total_frames=1600, create_env_fn=[healthy, hangs], frames_per_batch=50,
        num_collectors=2, worker_stall_timeout_s=stall_s, max_restarts=2, check=check,
    )  # fmt: skip


def hung_worker_every_build_retired() -> dict[str, Any]:
    """Issue 64's case: one of two workers' envs hangs at the first step of every build, no
    ``min_workers``: past ``max_restarts`` it is retired and the healthy worker finishes the run."""
    from tdscheme.envs import make_faulty_env

    healthy = functools.partial(make_faulty_env, sleep_s=0.01)
    hangs = functools.partial(make_faulty_env, hang_at_step=1)

    def check(stats: dict[str, Any]) -> str:
        wrong = [] if stats["workers_retired"] == [1] else [f"retired {stats['workers_retired']}"]
        if set(stats["frames_per_worker"]) != {0}:
            wrong.append(f"frames per worker {stats['frames_per_worker']}")
        return ", ".join(wrong)

    return collect_row(
        "an env hangs at every build of one worker, no min_workers (first-ready, "
        "worker_stall_timeout_s=3, max_restarts=1): retired, the healthy worker finishes",
        120.0, total_frames=2000, create_env_fn=[healthy, hangs], frames_per_batch=40,
        num_collectors=2, worker_stall_timeout_s=3.0, max_restarts=1, check=check,
    )  # fmt: skip


def hung_worker_stacked() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return collect_row(
            "an env hangs (stacked, worker_stall_timeout_s=5)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2, sync=True,
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def hung_worker_stacked_preemption() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return collect_row(
            "an env hangs (stacked with preemption)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2, sync=True,
            preemption={"fraction_workers": 0.5, "fraction_samples": 0.5},
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def worker_process_frozen_stacked() -> dict[str, Any]:
    """A worker's whole process stops (SIGSTOP) after it delivered batches: no probe answers."""
    import os
    import signal

    frozen: list[int] = []

    def freeze_once(collector: Any, i: int) -> None:
        if i == 2:
            worker = collector.workers[1]
            pid = actor_pid(worker)
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    try:
        return collect_row(
            "a worker's process frozen by SIGSTOP after batches (stacked, "
            "worker_stall_timeout_s=5, actor_start_timeout_s=600)", 60.0, total_frames=600,
            frames_per_batch=40, num_collectors=2, sync=True, worker_stall_timeout_s=5.0,
            actor_start_timeout_s=600.0, during=freeze_once, check=_hung_once,
        )  # fmt: skip
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


# -- restarts and elastic workers ----------------------------------------------------------


def hung_worker_every_incarnation_is_an_error() -> dict[str, Any]:
    import functools as ft

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.errors import WorkerError

    with ray_lease():
        start = time.perf_counter()
        try:
            with RayCollector(
                ft.partial(make_faulty_env, hang_at_step=5), frames_per_batch=20, total_frames=400,
                max_restarts=1, worker_stall_timeout_s=3.0, seed=0,
            ) as collector:  # fmt: skip
                for _ in collector:
                    pass
        except WorkerError as err:
            seconds = time.perf_counter() - start
            ok = "hung" in str(err) and "max_restarts=1" in str(err)
            return row(
                "hangs after every restart (max_restarts=1)", "clean error" if ok else "wrong result",
                seconds, 240.0, detail=str(err).splitlines()[0][:300],
            )  # fmt: skip
    return row("hangs after every restart", "wrong result", time.perf_counter() - start, 240.0)


def elastic_min_workers() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    def retired(stats: dict[str, Any]) -> str:
        return "" if stats["workers_retired"] == [0] else f"retired={stats['workers_retired']}"

    return collect_row(
        "a worker crashes after every restart, min_workers=1", 240.0, total_frames=400,
        create_env_fn=[functools.partial(make_faulty_env, exit_at_step=5), make_faulty_env],
        frames_per_batch=20, max_restarts=1, min_workers=1, check=retired,
    )  # fmt: skip


def restarts_exhausted_without_min_workers() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.errors import WorkerError

    with ray_lease():
        start = time.perf_counter()
        try:
            with RayCollector(
                [functools.partial(make_faulty_env, exit_at_step=5), make_faulty_env], frames_per_batch=20,
                total_frames=400, max_restarts=1, seed=0,
            ) as collector:  # fmt: skip
                for _ in collector:
                    pass
        except WorkerError as err:
            ok = "max_restarts=1" in str(err) and "collector worker 0" in str(err)
            return row(
                "restarts exhausted, no min_workers", "clean error" if ok else "wrong result",
                time.perf_counter() - start, 240.0, detail=str(err).splitlines()[0][:300],
            )  # fmt: skip
    return row("restarts exhausted", "wrong result", time.perf_counter() - start, 240.0)


# -- gradient workers ------------------------------------------------------------------------


def _grad_coordinator(worker_1_env: Callable[[], Any], **config: Any) -> Any:
    from tdscheme.envs import make_faulty_env
    from tdscheme.gradient_workers import GradientWorkersConfig, build_gradient_coordinator

    settings = dict(
        num_grad_workers=2, frames_per_batch=64, worker_resources={"num_cpus": 0.5}, seed=0
    )
    settings.update(config)
    preset = cartpole_preset("a2c")
    return build_gradient_coordinator(
        GradientWorkersConfig(**settings),
        env_factory=[functools.partial(make_faulty_env, "CartPole-v1"), worker_1_env],
        policy_factory=preset.policy_factory(), learner_factory=preset.learner_factory(),
        learner=preset.learner_factory()(**preset.policy_factory()()),
    )  # fmt: skip


def grad_worker_hung_is_rebuilt() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    fault = "a gradient worker's env hangs once (synchronous, timeout_s=5)"
    with tempfile.TemporaryDirectory() as tmp, ray_lease():
        hangs = functools.partial(
            make_faulty_env, "CartPole-v1", hang_at_step=70, once_path=f"{tmp}/hung"
        )
        with _grad_coordinator(hangs, timeout_s=5.0, max_restarts=2) as coordinator:
            start = time.perf_counter()
            steps = [coordinator.step() for _ in range(6)]
    hung, version = steps[-1]["hung"], steps[-1]["version"]
    ok = hung == 1 and steps[-1]["restarts"] == 1 and version == 6
    return row(
        fault, "survived" if ok else "wrong result", time.perf_counter() - start, 60.0,
        detail=f"hung={hung:g} restarts={steps[-1]['restarts']:g}, 6 steps, version {version:g}",
    )  # fmt: skip


def grad_worker_nonfinite_named() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env
    from tdscheme.errors import NonFiniteUpdateError

    fault = "a gradient worker's env gives reward=inf from step 65 (synchronous)"
    bad = functools.partial(
        make_faulty_env, "CartPole-v1", nonfinite_at_step=65, nonfinite_value=float("inf"),
        nonfinite_every=True,
    )  # fmt: skip
    steps: list[dict[str, float]] = []
    with ray_lease(), _grad_coordinator(bad) as coordinator:
        start = time.perf_counter()
        try:
            for _ in range(10):
                steps.append(coordinator.step())
        except NonFiniteUpdateError as err:
            seconds = time.perf_counter() - start
            left_out = sum(m["grads_nonfinite"] for m in steps)
            ok = "gradient worker 1" in str(err) and left_out >= 1 and len(steps) <= 4
            return row(
                fault, "clean error" if ok else "wrong result", seconds, 60.0,
                detail=f"{len(steps)} steps, {left_out:g} gradients left out before: "
                f"{str(err).splitlines()[0][:200]}",
            )  # fmt: skip
    return row(fault, "wrong result", time.perf_counter() - start, 60.0, detail="no error")


ROWS: list[tuple[str, Callable[[], dict]]] = [
    (fn.__name__, fn)
    for fn in (
        hung_worker_first_ready,
        hung_worker_hangs_again_first_ready,
        hung_worker_every_build_retired,
        hung_worker_stacked,
        hung_worker_stacked_preemption,
        worker_process_frozen_stacked,
        hung_worker_every_incarnation_is_an_error,
        elastic_min_workers,
        restarts_exhausted_without_min_workers,
        grad_worker_hung_is_rebuilt,
        grad_worker_nonfinite_named,
    )
]


if __name__ == "__main__":
    run_rows_here(ROWS)
