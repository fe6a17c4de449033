"""Fault rows of issue 24: background collection into a Ray-held replay buffer, and the buffer itself.

Each row runs one real fault (a real Ray, real gymnasium envs, torchrl's
``RayReplayBuffer``) and checks the frame ledger against ``total_frames``: every
frame written is counted once, and a run that ends short says why
(``ledger["short_reason"]``). Heavy imports stay inside the functions.

Run this module's rows without the table runner (one Ray for all, in this process)::

    .venv/bin/python benchmarks/fault_rows/replay.py [substring]
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ holds faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults import row  # noqa: E402
from harness import actor_pid, fresh_ray_env, pids_named, processes_left, wait_until  # noqa: E402

from fault_rows._parts import TDSCHEME, outputs_on_exit, run_rows_here  # noqa: E402
from fault_rows._parts import ray_lease as _ray  # noqa: E402


def env_fn(env_id: str, **faults: Any) -> Callable[[], Any]:
    """An env factory workers can unpickle: tdscheme's, with the fault-drill options."""
    from tdscheme.envs import make_faulty_env

    return functools.partial(make_faulty_env, env_id, **faults)


#: the runner's hard limit per row: the bounds plus Ray's start on a loaded machine
TIMEOUT_S = 420.0


@contextlib.contextmanager
def _buffer(capacity: int = 20_000, ndim: int = 1) -> Iterator[Any]:
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, capacity, ndim=ndim), batch_size=32,
        remote_config={"num_cpus": 0},
    )  # fmt: skip
    try:
        yield rb
    finally:
        with contextlib.suppress(Exception):
            rb.shutdown()


def _ledger(stats: dict[str, Any], total: int) -> tuple[str, str]:
    """``("balanced" | "unbalanced", text)``: the books, and the budget written or explained."""
    led = stats["ledger"]
    written_or_short = led["yielded"] + led["short"] == total and (
        led["short"] == 0 or led["short_reason"]
    )
    ok = led["balanced"] and led["in_flight"] == 0 and written_or_short
    text = " ".join(
        f"{k}={led[k]}" for k in ("asked", "yielded", "dropped", "lost", "discarded", "short")
    )
    return ("balanced" if ok else "unbalanced"), text


def _background(
    fault: str,
    bound_s: float,
    *,
    total: int,
    inject: Callable[[Any, Any], None],
    expect_error: str | None = None,
    buffer_ndim: int = 1,
    **kwargs: Any,
) -> dict[str, Any]:
    """``start()`` into a Ray-held buffer, ``inject(collector, buffer)``, wait for the end.

    Survived: the run ended with ``total`` frames written or short for a stated reason.
    With ``expect_error``: a clean error when the next call raises with that text.
    """
    from torchrl.envs.utils import RandomPolicy

    from tdscheme import RayCollector

    kwargs.setdefault("create_env_fn", env_fn("CartPole-v1"))
    kwargs.setdefault("policy", RandomPolicy(env_fn("CartPole-v1")().action_spec))
    with _ray(), _buffer(ndim=buffer_ndim) as rb:
        start = time.perf_counter()
        try:
            with RayCollector(
                total_frames=total, replay_buffer=rb, remote_configs={"num_cpus": 0.5}, **kwargs
            ) as collector:  # fmt: skip
                collector.start()
                inject(collector, rb)
                if not wait_until(lambda: not collector.is_running, bound_s):
                    return row(fault, "hang", time.perf_counter() - start, bound_s)
                error = None
                try:
                    stats = collector.stats(timeout=10)
                except Exception as err:  # noqa: BLE001 - the fault's error, examined below
                    error = err
                    stats = collector.stats(timeout=10)
        except Exception as err:  # noqa: BLE001 - a row reports, it does not raise
            detail = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return row(fault, "wrong result", time.perf_counter() - start, bound_s, detail=detail)
    seconds = time.perf_counter() - start
    books, text = _ledger(stats, total)
    if expect_error is not None:
        named = error is not None and expect_error in str(error)
        first = "no error" if error is None else str(error).splitlines()[0][:200]
        return row(fault, "clean error" if named else "wrong result", seconds, bound_s,
                   ledger="balanced" if stats["ledger"]["balanced"] else "unbalanced",
                   detail=f"{first}; restarts={stats['restarts']}; {text}")  # fmt: skip
    if error is not None:
        detail = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return row(fault, "wrong result", seconds, bound_s, detail=detail)
    outcome = "survived" if books == "balanced" else "wrong result"
    detail = f"restarts={stats['restarts']}; {text}; {stats['ledger']['short_reason'] or ''}"
    return row(fault, outcome, seconds, bound_s, ledger=books, detail=detail)


def _after_writes(frames: int, then: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def inject(collector: Any, rb: Any) -> None:
        wait_until(lambda: rb.write_count >= frames, 120)
        then(collector, rb)

    return inject


def _kill_worker(collector: Any, rb: Any) -> None:
    import ray

    ray.kill(collector.workers[0], no_restart=True)


def background_kill_whole_trajectories() -> dict[str, Any]:
    from torchrl.envs.utils import RandomPolicy

    pendulum = env_fn("Pendulum-v1")
    return _background(
        "background, trajs_per_batch=2 (Pendulum), a worker SIGKILLed while writing", 120.0,
        total=3000, inject=_after_writes(200, _kill_worker), create_env_fn=pendulum,
        policy=RandomPolicy(pendulum().action_spec), frames_per_batch=50, num_collectors=2,
        trajs_per_batch=2, sync=False,
    )  # fmt: skip


def background_kill_plain_batches() -> dict[str, Any]:
    return _background(
        "background, plain batches, a worker SIGKILLed while writing", 120.0, total=5000,
        inject=_after_writes(500, _kill_worker), frames_per_batch=200, num_collectors=2,
    )  # fmt: skip


def background_env_raises_once() -> dict[str, Any]:
    once = os.path.join(tempfile.mkdtemp(), "raised")
    flaky = env_fn("CartPole-v1", raise_at_step=60, once_path=once)
    cartpole = env_fn("CartPole-v1")
    return _background(
        "background, an env raises once (rebuilt, its batch lost)", 120.0, total=2000,
        inject=lambda c, rb: None, create_env_fn=[cartpole, flaky], frames_per_batch=100,
    )  # fmt: skip


def background_env_raises_always() -> dict[str, Any]:
    failing = env_fn("CartPole-v1", raise_at_step=30)
    cartpole = env_fn("CartPole-v1")
    return _background(
        "background, an env raises after every restart (max_restarts=2)", 120.0, total=100_000,
        inject=lambda c, rb: None, create_env_fn=[cartpole, failing], frames_per_batch=100,
        max_restarts=2, expect_error="failed 3 times, max_restarts=2",
    )  # fmt: skip


def background_buffer_actor_killed() -> dict[str, Any]:
    import ray

    return _background(
        "background, the Ray-held buffer's actor SIGKILLed", 60.0, total=-1,
        inject=_after_writes(400, lambda c, rb: ray.kill(rb._rb, no_restart=True)),
        frames_per_batch=200, num_collectors=2,
        expect_error="the replay buffer's actor died (during a worker's write)",
    )  # fmt: skip


def background_ndim2_storage_budget() -> dict[str, Any]:
    from torchrl.envs.utils import RandomPolicy

    batched = env_fn("CartPole-v1", num_envs=8)
    return _background(
        "background, 8 envs into an ndim=2 storage, total_frames=1003 (no multiple)", 120.0,
        total=1003, inject=lambda c, rb: None, create_env_fn=batched, buffer_ndim=2,
        policy=RandomPolicy(batched().action_spec),
        frames_per_batch=256, num_collectors=2,
    )  # fmt: skip


def background_nan_rewards_dropped() -> dict[str, Any]:
    nan = env_fn("CartPole-v1", nonfinite_at_step=40, nonfinite_every=True)
    cartpole = env_fn("CartPole-v1")
    return _background(
        "background, NaN rewards from one worker, drop_nonfinite_frames", 120.0, total=2000,
        inject=lambda c, rb: None, create_env_fn=[cartpole, nan], frames_per_batch=100,
        drop_nonfinite_frames=True,
    )  # fmt: skip


def buffer_actor_hung() -> dict[str, Any]:
    """The buffer's process stopped (SIGSTOP): a bounded sample is a TimeoutError, not a hang."""
    import torch
    from tensordict import TensorDict

    from tdscheme.replay.bounded import BoundedRayBuffer

    fault, bound_s = "the Ray-held buffer's process stopped (SIGSTOP) during sample()", 10.0
    with _ray(), _buffer() as rb:
        bounded = BoundedRayBuffer(rb, timeout_s=60.0)
        bounded.extend(TensorDict({"x": torch.zeros(64)}, [64]))
        pid = actor_pid(rb._rb, timeout_s=60)
        bounded.timeout_s = 5.0
        os.kill(pid, signal.SIGSTOP)
        start = time.perf_counter()
        try:
            bounded.sample()
            outcome, detail = "wrong result", "no error"
        except TimeoutError as err:
            outcome, detail = "clean error", str(err)
        finally:
            os.kill(pid, signal.SIGCONT)
    return row(fault, outcome, time.perf_counter() - start, bound_s, detail=detail)


def preset_ray_buffer_on_two_cpus() -> dict[str, Any]:
    """The README's --buffer-location ray: 2 collectors of 1 CPU and the buffer, on 2 CPUs."""
    from tdscheme.presets import get_preset

    fault, bound_s = "td3-pendulum --buffer-location ray, 2 collectors x 1 CPU on 2 CPUs", 180.0
    settings = {"num_collectors": 2, "num_envs": 2, "frames_per_batch": 128, "total_frames": 1024,
                "init_random_frames": 256, "collector_resources": {"num_cpus": 1},
                "buffer_location": "ray", "eval_every_frames": 0, "eval_episodes": 1,
                "progress": False, "run_dir": tempfile.mkdtemp()}  # fmt: skip
    with _ray():
        start = time.perf_counter()
        try:
            with get_preset("td3-pendulum").override(settings).build_trainer() as trainer:
                summary = trainer.run()
        except Exception as err:  # noqa: BLE001
            detail = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return row(fault, "wrong result", time.perf_counter() - start, bound_s, detail=detail)
    ok = summary["frames"] == 1024
    return row(fault, "survived" if ok else "wrong result", time.perf_counter() - start, bound_s,
               detail=f"frames={summary['frames']} of 1024")  # fmt: skip


def cli_buffer_actor_killed() -> dict[str, Any]:
    """``tdscheme train --buffer-location ray``, the buffer's actor SIGKILLed mid-run.

    The command must exit 1 within the bound with two lines (the error naming the
    replay buffer; the frames, the last checkpoint and the resume command), no
    traceback, and no Ray process left behind.
    """
    import subprocess

    fault, bound_s = "CLI run, the Ray-held buffer's actor SIGKILLed mid-run", 60.0
    work = Path(tempfile.mkdtemp(prefix="b", dir="/tmp"))
    ray_tmp = work / "ray"
    ray_tmp.mkdir()
    run_dir = work / "run"
    proc = subprocess.Popen(
        [*TDSCHEME, "train", "td3-pendulum", "--buffer-location", "ray",
         "--checkpoint-replay-buffer", "--num-collectors", "1", "--num-envs", "2",
         "--frames-per-batch", "128", "--init-random-frames", "128", "--total-frames",
         "100000000", "--checkpoint-every-frames", "256", "--eval-every-frames", "0",
         "--collector-resources", '{"num_cpus": 0.5}', "--progress", "false",
         "--run-dir", str(run_dir)],
        env=fresh_ray_env(ray_tmp), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, cwd=work,
    )  # fmt: skip
    checkpoints = run_dir / "checkpoints"
    wait_until(lambda: proc.poll() is not None or any(checkpoints.glob("ckpt_*.pt")), 240.0)
    started = proc.poll() is None and any(checkpoints.glob("ckpt_*.pt"))
    buffers = pids_named("ray::OneLineReprReplayBuffer")
    if not started or len(buffers) != 1:
        proc.kill()
        detail = f"no checkpoint or no single buffer actor ({buffers}); exit {proc.poll()}"
        return row(fault, "wrong result", 0.0, bound_s, detail=detail)
    start = time.perf_counter()
    os.kill(int(buffers[0]), signal.SIGKILL)
    outputs = outputs_on_exit(proc, 120.0)
    if outputs is None:
        return row(fault, "hang", time.perf_counter() - start, bound_s, detail="no exit in 120 s")
    _, printed = outputs
    seconds = time.perf_counter() - start
    left = processes_left(str(ray_tmp))
    lines = printed.splitlines()  # Ray may relay the killed actor's last output around them
    at = [i for i, line in enumerate(lines) if line.startswith("tdscheme train: error:")]
    last = lines[at[0] : at[0] + 2] if len(at) == 1 else []
    ok = (
        proc.returncode == 1 and not left and "Traceback" not in printed and len(last) == 2
        and last[0].startswith("tdscheme train: error: ReplayBufferDied: the replay buffer's")
        and f"resume with: tdscheme train --resume {run_dir}" in last[1]
    )  # fmt: skip
    detail = (f"exit {proc.returncode}; Ray processes left: {len(left)}; "
              + " / ".join(line[:110] for line in last))  # fmt: skip
    return row(fault, "clean error" if ok else "wrong result", seconds, bound_s, detail=detail)


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    (fn.__name__, fn)
    for fn in (
        background_kill_whole_trajectories,
        background_kill_plain_batches,
        background_env_raises_once,
        background_env_raises_always,
        background_buffer_actor_killed,
        background_ndim2_storage_budget,
        background_nan_rewards_dropped,
        buffer_actor_hung,
        preset_ray_buffer_on_two_cpus,
        cli_buffer_actor_killed,
    )
]


if __name__ == "__main__":
    run_rows_here(ROWS)
