"""Fault rows of issue 12, sections 1 and 2: placement, liveness, elastic workers, the frame ledger.

Each row is a function returning the dict ``benchmarks/faults.py`` records; it runs
one real fault (a real Ray, real CartPole collection) and checks the frame ledger
(``balanced``: every request's resolution added up to what it asked, nothing
unaccounted; ``collected == yielded + dropped + preempted + lost + discarded``;
nothing left in flight; and ``yielded`` equal to the frames the loop received).
Heavy imports stay inside the functions.

Run one module's rows without the table runner (one Ray for all, in this process)::

    .venv/bin/python benchmarks/fault_rows/liveness.py [substring]
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ holds faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults import row as _row  # noqa: E402

from fault_rows._parts import ray_lease as _ray  # noqa: E402

#: the runner's hard limit per row: the bounds plus Ray's start on a loaded machine
TIMEOUT_S = 420.0

_PARTS = ("yielded", "dropped", "preempted", "lost", "discarded")


def _ledger(stats: dict[str, Any], received: int) -> str:
    led = stats["ledger"]
    ok = (
        led["balanced"]
        and led["collected"] == sum(led[p] for p in _PARTS)
        and led["in_flight"] == 0
        and led["yielded"] == received
    )
    return "balanced" if ok else "unbalanced"


def _led_text(stats: dict[str, Any]) -> str:
    led = stats["ledger"]
    return " ".join(f"{k}={led[k]}" for k in ("asked", "collected", *_PARTS, "unaccounted"))


def _valid_frames(batch: Any) -> int:
    from tdscheme.keys import MASK_KEY

    if batch is None:
        return 0
    mask = batch.get(MASK_KEY, None)
    return batch.numel() if mask is None else int(mask.sum())


def _collect(
    fault: str,
    bound_s: float,
    *,
    total_frames: int,
    check: Callable[[dict[str, Any]], str] = lambda stats: "",
    during: Callable[[Any, int], None] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Runs a RayCollector to ``total_frames``; survived when every frame came and ``check`` is happy.

    ``check(stats)`` returns what is wrong ("" when nothing); ``during(collector, i)``
    is called after the ``i``-th batch (to inject a fault).
    """
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    kwargs.setdefault("create_env_fn", make_faulty_env)
    with _ray():
        start = time.perf_counter()  # Ray is up: the row times the collector, not Ray's start
        try:
            with RayCollector(
                total_frames=total_frames, seed=0, batch_timeout_s=2 * bound_s, **kwargs
            ) as collector:
                received = 0
                for i, batch in enumerate(collector):
                    received += _valid_frames(batch)
                    if during is not None:
                        during(collector, i)
                stats = collector.stats(timeout=5)
        except Exception as err:  # noqa: BLE001 - a row reports, it does not raise
            message = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return _row(fault, "wrong result", time.perf_counter() - start, bound_s, detail=message)
    seconds = time.perf_counter() - start
    if kwargs.get("replay_buffer") is not None:
        received = stats["frames"]  # written by the workers
    problems = check(stats)
    if received != total_frames:
        problems += f" {received} frames yielded, {total_frames} asked"
    outcome = "wrong result" if problems else "survived"
    detail = (problems.strip() + "; " if problems else "") + _led_text(stats)
    return _row(fault, outcome, seconds, bound_s, ledger=_ledger(stats, received), detail=detail)


def _expect_error(
    fault: str, bound_s: float, build: Callable[[], Any], names: tuple[str, ...]
) -> dict[str, Any]:
    from tdscheme.errors import PlacementError

    with _ray():
        start = time.perf_counter()
        try:
            built = build()
        except PlacementError as err:
            seconds = time.perf_counter() - start
            missing = [n for n in names if n not in str(err)]
            outcome = "wrong result" if missing else "clean error"
            detail = str(err)[:300] + (f" (does not name {missing})" if missing else "")
            return _row(fault, outcome, seconds, bound_s, detail=detail)
        except Exception as err:  # noqa: BLE001
            detail = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return _row(fault, "wrong result", time.perf_counter() - start, bound_s, detail=detail)
        built.shutdown()
    return _row(fault, "wrong result", time.perf_counter() - start, bound_s, detail="no error")


def _cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 1))


# -- 1. placement -------------------------------------------------------------------------


def placement_too_many_collectors() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, num_collectors=2 * _cpus() + 2)

    return _expect_error(
        "num_collectors = 2 x cores + 2 (1 CPU each)", 30.0, build,
        ("num_collectors", "--num-collectors", "asked in all", "CPU="),
    )  # fmt: skip


def placement_one_worker_too_big() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, remote_configs={"num_cpus": 1000})

    return _expect_error(
        "remote_configs={'num_cpus': 1000}", 30.0, build,
        ("remote_configs", "collector_resources", "1000", "largest node"),
    )  # fmt: skip


def placement_gpu_on_cpu_cluster() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, remote_configs={"num_gpus": 1})

    return _expect_error(
        "remote_configs={'num_gpus': 1} on a cluster without GPU", 30.0, build,
        ("remote_configs", "GPU"),
    )  # fmt: skip


def placement_custom_resource_missing() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(
            make_faulty_env,
            frames_per_batch=20,
            remote_configs={"resources": {"accelerator_tpu": 1}},
        )

    return _expect_error(
        "remote_configs with a resource no node has", 30.0, build, ("accelerator_tpu",)
    )


def placement_pending_past_actor_start_timeout() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    class Placeholder:  # local: pickled by value, whatever imports this module
        def ping(self) -> int:
            return 1

    with _ray():
        holder = ray.remote(num_cpus=_cpus())(Placeholder).remote()
        try:
            ray.get(holder.ping.remote(), timeout=300)  # every CPU held before the timer starts
            return _expect_error(
                "every CPU held by another actor, actor_start_timeout_s=3", 30.0,
                lambda: RayCollector(make_faulty_env, frames_per_batch=20, actor_start_timeout_s=3),
                ("actor_start_timeout_s=3", "Free resources"),
            )  # fmt: skip
        finally:
            with contextlib.suppress(Exception):
                ray.kill(holder)


def placement_grad_workers_too_big() -> dict[str, Any]:
    from tdscheme import Scheme
    from tdscheme.presets import get_preset

    def build() -> Any:
        preset = get_preset("a3c-cartpole").override({"grad_worker_resources": {"num_cpus": 1000}})
        return Scheme(**preset.factories(), config=preset.scheme)

    return _expect_error(
        "grad_worker_resources={'num_cpus': 1000}", 30.0, build,
        ("grad_worker_resources", "--num-grad-workers"),
    )  # fmt: skip


def placement_cli_too_many_collectors() -> dict[str, Any]:
    import os
    import subprocess

    start = time.perf_counter()
    cores = os.cpu_count() or 1
    collectors = 1 << cores.bit_length()  # a power of two past the cores (divides the batch)
    command = [
        os.path.join(os.path.dirname(sys.executable), "tdscheme"), "train", "ppo-cartpole",
        "--num-collectors", str(collectors), "--total-frames", "2000",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(
            [*command, "--run-dir", d], capture_output=True, text=True, timeout=300
        )
    seconds = time.perf_counter() - start
    text = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode != 0 and "cannot place" in text and "--num-collectors" in text
    line = next((x for x in text.splitlines() if "cannot place" in x), text[-300:])
    return _row(
        f"tdscheme train --num-collectors {collectors} on {cores} cores",
        "clean error" if ok else "wrong result",
        seconds, 120.0, detail=f"exit {proc.returncode}: {line[:300]}",
    )  # fmt: skip


# -- 1. liveness ---------------------------------------------------------------------------


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
        return _collect(
            "an env hangs (first-ready, worker_stall_timeout_s=5)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2,
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def hung_worker_stacked() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return _collect(
            "an env hangs (stacked, worker_stall_timeout_s=5)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2, sync=True,
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def hung_worker_stacked_preemption() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return _collect(
            "an env hangs (stacked with preemption)", 240.0, total_frames=600,
            create_env_fn=_hang_env(tmp), frames_per_batch=40, num_collectors=2, sync=True,
            preemption={"fraction_workers": 0.5, "fraction_samples": 0.5},
            worker_stall_timeout_s=5.0, check=_hung_once,
        )  # fmt: skip


def worker_process_frozen_stacked() -> dict[str, Any]:
    """A worker's whole process stops (SIGSTOP) after it delivered batches: no probe answers."""
    import os
    import signal

    import ray

    frozen: list[int] = []

    def freeze_once(collector: Any, i: int) -> None:
        if i == 2:
            worker = collector.workers[1]
            pid = ray.get(worker.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    try:
        return _collect(
            "a worker's process frozen by SIGSTOP after batches (stacked, "
            "worker_stall_timeout_s=5, actor_start_timeout_s=600)", 60.0, total_frames=600,
            frames_per_batch=40, num_collectors=2, sync=True, worker_stall_timeout_s=5.0,
            actor_start_timeout_s=600.0, during=freeze_once, check=_hung_once,
        )  # fmt: skip
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def hung_worker_every_incarnation_is_an_error() -> dict[str, Any]:
    import functools as ft

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.errors import WorkerError

    with _ray():
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
            return _row(
                "every incarnation hangs (max_restarts=1)", "clean error" if ok else "wrong result",
                seconds, 240.0, detail=str(err).splitlines()[0][:300],
            )  # fmt: skip
    return _row("every incarnation hangs", "wrong result", time.perf_counter() - start, 240.0)


def elastic_min_workers() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    def retired(stats: dict[str, Any]) -> str:
        return "" if stats["workers_retired"] == [0] else f"retired={stats['workers_retired']}"

    return _collect(
        "a worker crashes every incarnation, min_workers=1", 240.0, total_frames=400,
        create_env_fn=[functools.partial(make_faulty_env, exit_at_step=5), make_faulty_env],
        frames_per_batch=20, max_restarts=1, min_workers=1, check=retired,
    )  # fmt: skip


def restarts_exhausted_without_min_workers() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.errors import WorkerError

    with _ray():
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
            return _row(
                "restarts exhausted, no min_workers", "clean error" if ok else "wrong result",
                time.perf_counter() - start, 240.0, detail=str(err).splitlines()[0][:300],
            )  # fmt: skip
    return _row("restarts exhausted", "wrong result", time.perf_counter() - start, 240.0)


# -- 2. the ledger under the faults that already held ---------------------------------------


def ledger_worker_sigkill() -> dict[str, Any]:
    import ray

    def kill_once(collector: Any, i: int) -> None:
        if i == 2:
            ray.kill(collector.workers[0], no_restart=True)

    def restarted(stats: dict[str, Any]) -> str:
        return "" if stats["restarts"] == 1 else f"restarts={stats['restarts']}"

    return _collect(
        "a worker SIGKILLed mid-run (ray.kill)", 240.0, total_frames=600, frames_per_batch=40,
        num_collectors=2, during=kill_once, check=restarted,
    )  # fmt: skip


def ledger_env_crash() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    return _collect(
        "an env exits its process every 150 steps", 240.0, total_frames=600, frames_per_batch=40,
        create_env_fn=[functools.partial(make_faulty_env, exit_at_step=150), make_faulty_env], max_restarts=5,
        check=lambda s: "" if s["ledger"]["lost"] > 0 else "no frame counted lost",
    )  # fmt: skip


def ledger_preemption() -> dict[str, Any]:
    from tdscheme.envs import make_faulty_env

    return _collect(
        "a slow worker preempted (stacked)", 240.0, total_frames=400, frames_per_batch=80,
        create_env_fn=[make_faulty_env, functools.partial(make_faulty_env, sleep_s=0.02)], sync=True,
        preemption={"fraction_workers": 0.5, "fraction_samples": 0.5},
        check=lambda s: "" if s["ledger"]["preempted"] > 0 else "nothing preempted",
    )  # fmt: skip


def ledger_lag_drop() -> dict[str, Any]:
    def push(collector: Any, i: int) -> None:
        collector.update_policy_weights_()

    from fault_rows._parts import cartpole_preset

    return _collect(
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
        return _collect(
            "workers write into a Ray-held buffer, total_frames=500", 240.0, total_frames=500,
            frames_per_batch=200, num_collectors=2, replay_buffer=buffer,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            buffer.shutdown()


# -- gradient workers ------------------------------------------------------------------------


def _grad_coordinator(worker_1_env: Callable[[], Any], **config: Any) -> Any:
    from fault_rows._parts import cartpole_preset
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
    with tempfile.TemporaryDirectory() as tmp, _ray():
        hangs = functools.partial(
            make_faulty_env, "CartPole-v1", hang_at_step=70, once_path=f"{tmp}/hung"
        )
        with _grad_coordinator(hangs, timeout_s=5.0, max_restarts=2) as coordinator:
            start = time.perf_counter()
            steps = [coordinator.step() for _ in range(6)]
    hung, version = steps[-1]["hung"], steps[-1]["version"]
    ok = hung == 1 and steps[-1]["restarts"] == 1 and version == 6
    return _row(
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
    with _ray(), _grad_coordinator(bad) as coordinator:
        start = time.perf_counter()
        try:
            for _ in range(10):
                steps.append(coordinator.step())
        except NonFiniteUpdateError as err:
            seconds = time.perf_counter() - start
            left_out = sum(m["grads_nonfinite"] for m in steps)
            ok = "gradient worker 1" in str(err) and left_out >= 1 and len(steps) <= 4
            return _row(
                fault, "clean error" if ok else "wrong result", seconds, 60.0,
                detail=f"{len(steps)} steps, {left_out:g} gradients left out before: "
                f"{str(err).splitlines()[0][:200]}",
            )  # fmt: skip
    return _row(fault, "wrong result", time.perf_counter() - start, 60.0, detail="no error")


# -- total_frames exact ----------------------------------------------------------------------


def total_frames_exact_first_ready() -> dict[str, Any]:
    return _collect(
        "total_frames=500, frames_per_batch=200 (first-ready)", 240.0, total_frames=500,
        frames_per_batch=200, num_collectors=2,
    )  # fmt: skip


def total_frames_exact_stacked() -> dict[str, Any]:
    return _collect(
        "total_frames=500, frames_per_batch=200 (stacked)", 240.0, total_frames=500,
        frames_per_batch=200, num_collectors=2, sync=True,
    )  # fmt: skip


def total_frames_under_one_batch() -> dict[str, Any]:
    return _collect(
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
        _ray(),
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
    return _row(
        "trajectory ids after a restart (no splicing)", outcome, time.perf_counter() - start,
        240.0, ledger=_ledger(stats, 400), detail=f"{spliced} batches reused old ids",
    )  # fmt: skip


def traj_ids_not_spliced_in_a_ray_held_buffer() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env
    from tdscheme.keys import WORKER_ID_KEY

    fault = "trajectory ids after a restart, workers writing into a Ray-held buffer"
    with _ray():
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
    return _row(
        fault, "survived" if ok else "wrong result", time.perf_counter() - start, 240.0,
        ledger=_ledger(stats, len(data)),
        detail=f"{pieces} trajectory ids written in pieces, restarts={stats['restarts']}",
    )  # fmt: skip


def object_store_pressure() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    start = time.perf_counter()
    bound_s = 180.0
    if ray.is_initialized():
        return _row("object store pressure", "wrong result", 0.0, bound_s, detail="Ray running")
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
        return _row("object store pressure", "wrong result", time.perf_counter() - start,
                    bound_s, detail=detail)  # fmt: skip
    finally:
        ray.shutdown()
    outcome = "survived" if received == 6000 else "wrong result"
    return _row(
        "56 MB batches through an 80 MiB object store", outcome, time.perf_counter() - start,
        bound_s, ledger=_ledger(stats, received), detail=_led_text(stats),
    )  # fmt: skip


ROWS: list[tuple[str, Callable[[], dict]]] = [
    (fn.__name__, fn)
    for fn in (
        placement_too_many_collectors,
        placement_one_worker_too_big,
        placement_gpu_on_cpu_cluster,
        placement_custom_resource_missing,
        placement_pending_past_actor_start_timeout,
        placement_grad_workers_too_big,
        placement_cli_too_many_collectors,
        hung_worker_first_ready,
        hung_worker_stacked,
        hung_worker_stacked_preemption,
        worker_process_frozen_stacked,
        hung_worker_every_incarnation_is_an_error,
        elastic_min_workers,
        restarts_exhausted_without_min_workers,
        grad_worker_hung_is_rebuilt,
        grad_worker_nonfinite_named,
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
    wanted = sys.argv[1:] or [""]
    for name, fn in ROWS:
        if any(w in name for w in wanted):
            print(json.dumps({"row": name, **fn()}), flush=True)
