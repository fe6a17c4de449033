"""How ``collection.py``'s sections build and measure one collector.

The settings of a run and its measurement record, tdscheme's and torchrl's
``RayCollector`` built alike (``{"num_cpus": 1}`` per actor, the same huge
``total_frames``), and :func:`measure`: construction to first batch and frames/s of
one collector, n/a with the error when it fails, Ray's CPUs free again after it.
``fast_paths.py`` and ``scale_sim.py`` measure with the same parts.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import peers  # benchmarks/peers.py, next to this script (Ray workers see this directory too)
import ray
from harness import deadline, failure_note, frames_per_s, settle, stderr_log
from report import Recorder

# torchrl 0.14.1's RayCollector yields nothing with total_frames=-1 (its loop tests
# collected < total), so both collectors get the same huge total and the loops break.
TOTAL_FRAMES = 2**40
ENVS = {"CartPole-v1": (4, 2, True), "Pendulum-v1": (3, 1, False)}  # obs dim, actions, discrete
SCALE_COLLECTORS = (2, 4, 8, 14)

log = stderr_log("collection")


@dataclass
class Settings:
    """What one run measures."""

    frames: int = 20_000
    min_batches: int = 3
    pushes: int = 10
    transfer_reps: int = 9
    ready_waits: int = 5
    timeout_s: float = 240.0
    sweep_num_envs: tuple[int, ...] = (16, 32, 64)
    sweep_frames_per_batch: tuple[int, ...] = (4096, 8192)
    same_matrix: tuple[tuple[str, bool], ...] = tuple(
        (env, sync) for env in ENVS for sync in (False, True)
    )
    docstring_collectors: tuple[int, ...] = (1, 2)
    startup_runs: int = 3
    prestart_wait_s: float = 10.0  # startup, "Ray up": time for the prestarted workers' imports
    scale_collectors: tuple[int, ...] = SCALE_COLLECTORS

    @classmethod
    def quick(cls, frames: int | None) -> Settings:
        """Tiny counts and one case per code path: a smoke test."""
        return cls(
            frames=frames or 2_000,
            min_batches=2,
            pushes=2,
            transfer_reps=2,
            ready_waits=2,
            timeout_s=120.0,
            sweep_num_envs=(32,),
            sweep_frames_per_batch=(2048,),
            same_matrix=(("Pendulum-v1", True),),  # first-ready CartPole runs in push, large
            docstring_collectors=(1,),
            startup_runs=1,
            scale_collectors=(2, 4),
        )


@dataclass
class Measurement:
    """One JSON line; ``value`` is None (n/a) when ``note`` says why."""

    section: str
    impl: str
    env: str
    order: str
    metric: str
    value: float | None
    unit: str
    config: str = ""
    note: str = ""


def failure(err: BaseException) -> str:
    """Logs the traceback; returns the note for an n/a measurement."""
    return failure_note(err, log)


def tdscheme_collector(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    from tdscheme import RayCollector  # missing -> ImportError -> reported as n/a

    kwargs.setdefault("num_collectors", 2)
    return RayCollector(
        env_fn, policy, total_frames=TOTAL_FRAMES, remote_configs={"num_cpus": 1}, **kwargs
    )


def torchrl_collector(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    return peers.torchrl_ray_collector(
        env_fn, policy, total_frames=TOTAL_FRAMES, remote_configs={"num_cpus": 1}, **kwargs
    )


def tdscheme_torchrl_class(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    """tdscheme with ``collector_class=Collector``: torchrl's class in each worker, exactly."""
    from tdscheme.rollout.torchrl_names import Collector

    return tdscheme_collector(env_fn, policy, collector_class=Collector, **kwargs)


RAY_COLLECTORS = {"tdscheme": tdscheme_collector, "torchrl": torchrl_collector}
ACTORS = {"tdscheme": lambda c: c.workers, "torchrl": lambda c: c.remote_collectors}


def wait_ready(impl: str, collector: Any, timeout_s: float) -> None:
    """Blocks until every worker actor has finished its constructor.

    torchrl's RayCollector constructor already waits for that (it ``ray.get``s each
    worker's ``register_scheme_receiver``); tdscheme's returns at once. Waiting here
    makes a first push time the push, not the actors' start.
    """
    actors = ACTORS[impl](collector)
    ray.get([actor.__ray_ready__.remote() for actor in actors], timeout=timeout_s)


@contextlib.contextmanager
def running(make: Callable[[], Any], timeout_s: float) -> Iterator[tuple[Any, float]]:
    """Builds a collector; yields it and its construction start time; always shuts it down.

    Call :func:`harness.settle` after handling any error: a collector whose constructor
    was interrupted is only collected (and its actors killed) once the traceback is gone.
    """
    collector = None
    try:
        with deadline(timeout_s), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*before weight synchronization.*")
            warnings.filterwarnings("ignore", message=".*missing transforms required.*")
            start = time.perf_counter()
            collector = make()
            yield collector, start
    finally:
        if collector is not None:
            with contextlib.suppress(Exception):
                collector.shutdown()


def measure(
    rec: Recorder,
    s: Settings,
    row: dict[str, str],
    make: Callable[[], Any],
    *,
    frames: int | None = None,
    after: Callable[[Any, Iterator[Any], float], dict[str, float]] | None = None,
    units: dict[str, str] | None = None,
) -> float | None:
    """Time to first batch and frames/s of one collector; n/a (with the error) if it fails.

    ``row`` holds section, impl, env, order, config. ``after(collector, iterator, frames_per_s)``
    may return more measurements taken before shutdown: seconds, unless ``units`` names
    another unit for them (``"x"``: a ratio).
    """
    results: dict[str, float | None] = {"first_batch_s": None, "frames_per_s": None}
    note = ""
    log(" | ".join(row.values()))
    try:
        with running(make, s.timeout_s) as (collector, start):
            it = iter(collector)
            next(it)
            results["first_batch_s"] = time.perf_counter() - start
            fps = frames_per_s(it, frames=frames or s.frames, min_batches=s.min_batches)
            results["frames_per_s"] = fps
            if after is not None:
                results.update(after(collector, it, fps))
    except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
        note = failure(err)
    settle()
    for metric, value in results.items():
        unit = "frames/s" if metric == "frames_per_s" else (units or {}).get(metric, "s")
        rec.add(Measurement(**row, metric=metric, value=value, unit=unit, note=note))
    return results["frames_per_s"]
