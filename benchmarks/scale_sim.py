"""Scale simulation: what the driver process pays per worker, with many sleeping workers on 2 CPUs.

Each worker steps one CartPole-v1 env that sleeps ``--sleep-s`` per step
(:func:`tdscheme.envs.faulty.make_faulty_env`), so its ideal rate is known and costs
almost no CPU: ``W`` workers give at most ``W / sleep_s`` frames/s. Sixteen such
workers fit on this 2-core machine (``remote_configs={"num_cpus": 0.1}``), so the
driver's cost per worker and per batch shows before a real cluster does.

For each worker count (``--workers``, default 4,8,16) tdscheme's ``RayCollector`` and
torchrl's ``RayCollector`` run in the same process and the same Ray, in alternating
order, with the same policy (``benchmarks/peers.py``'s deterministic 2x64 tanh MLP),
``sync=False`` (first-ready), each library's defaults otherwise (tdscheme keeps one
request in flight per worker while the driver holds a batch; torchrl resubmits a
worker after its batch is yielded), and ``frames_per_batch = --steps-per-batch``
(one worker's batch). After the workers' constructors returned and one warm-up
batch per worker, ``--batches-per-worker`` x ``W`` batches are measured:

* frames/s, the ideal ``W / sleep_s`` and their ratio (efficiency); a per-step cost
  on top of the sleep (the policy, torchrl's env wrapper, the sleep's overshoot) keeps
  it below 1 even with a free driver: ``one worker in the driver`` (torchrl's
  single-process ``Collector`` stepping the same env, no Ray) is the per-worker
  ceiling, and ``vs W x one`` is the measured rate over ``W`` times it;
* the driver process's CPU seconds per batch and in cores (``time.process_time()``
  around the measured iteration). This counts every thread of the driver
  process, Ray's own included (its core worker's gRPC and event-loop threads);
  the ``Ray idle`` row is that cost with no collector (CPU seconds per wall
  second over 2 s), to be read as a floor;
* a projection: how many such workers one driver core could take at this cost per
  batch (``1 / (CPU s per batch x batches/s per worker)``), if that cost stayed
  the same per batch as workers are added.

Every collector is shut down after its measurement and the next one starts once
Ray has its CPUs back. Ray is started once (``num_cpus=2``, no dashboard). Run
from the repository root::

    .venv/bin/python benchmarks/scale_sim.py                    # 4, 8, 16 workers
    .venv/bin/python benchmarks/scale_sim.py --quick            # 2, 4 workers: smoke test
    .venv/bin/python benchmarks/scale_sim.py --workers 4,32 --sleep-s 0.02 --out r.md

Output: one JSON line per measurement (with the machine, the versions and
``load_1m_now``, the 1-minute load average when that measurement was recorded,
just after it: it includes the start of its actors),
then a table; ``--out`` writes it as a markdown section for ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import peers  # benchmarks/peers.py, next to this script (Ray workers see this directory too)
from collection_runs import TOTAL_FRAMES, running, wait_ready
from harness import failure_note, frames_in, settle, stderr_log, turn_order
from peers import mlp_policy
from report import Recorder, run_sections

from tdscheme.envs.faulty import make_faulty_env

ENV_ID = "CartPole-v1"
IMPLS = ("tdscheme", "torchrl")
REMOTE_CONFIGS = {"num_cpus": 0.1}  # 16 actors on 2 CPUs: the workers mostly sleep
METRICS = {  # metric -> column title
    "frames_per_s": "frames/s",
    "ideal_frames_per_s": "ideal",
    "efficiency": "efficiency",
    "vs_one_worker": "vs W x one",
    "driver_cpu_s_per_batch": "driver CPU/batch",
    "driver_cpu_cores": "driver CPU (cores)",
    "projected_workers_per_core": "workers/driver core (proj.)",
    "batches": "batches",
}


@dataclass
class Settings:
    """What one run measures."""

    workers: tuple[int, ...] = (4, 8, 16)
    sleep_s: float = 0.01
    steps_per_batch: int = 50
    batches_per_worker: int = 8
    timeout_s: float = 300.0

    @property
    def batches_per_s_per_worker(self) -> float:
        """Batches one worker delivers per second at the ideal rate."""
        return 1.0 / (self.steps_per_batch * self.sleep_s)


@dataclass
class Measurement:
    """One JSON line; ``value`` is None (n/a) when ``note`` says why."""

    impl: str
    workers: int
    metric: str
    value: float | None
    unit: str
    config: str = ""
    note: str = ""
    load_1m_now: float = 0.0


log = stderr_log("scale_sim")


def make_collector(impl: str, env_fn: Callable[[], Any], policy: Any, s: Settings, n: int) -> Any:
    """tdscheme's or torchrl's RayCollector with ``n`` sleeping workers, first-ready."""
    kwargs: dict[str, Any] = dict(
        frames_per_batch=s.steps_per_batch, sync=False, num_collectors=n,
        total_frames=TOTAL_FRAMES, remote_configs=dict(REMOTE_CONFIGS),
    )  # fmt: skip
    if impl == "tdscheme":
        from tdscheme import RayCollector

        return RayCollector(env_fn, policy, **kwargs)
    return peers.torchrl_ray_collector(env_fn, policy, **kwargs)


def timed_batches(it: Iterator[Any], batches: int) -> tuple[int, float, float]:
    """Takes ``batches`` batches; returns their frames, wall seconds and driver CPU seconds."""
    frames = 0
    cpu = time.process_time()  # every thread of this process: Ray's driver threads too
    start = time.perf_counter()
    for _ in range(batches):
        frames += frames_in(next(it))
    return frames, time.perf_counter() - start, time.process_time() - cpu


def measure_idle(rec: Recorder, seconds: float = 2.0) -> None:
    """The driver's CPU with Ray up and no collector: the floor of the driver CPU column."""
    cpu = time.process_time()
    time.sleep(seconds)
    cores = (time.process_time() - cpu) / seconds
    rec.add(Measurement("Ray idle", 0, "driver_cpu_cores", cores, "cores", load_1m_now=load()))


def measure_one_worker(rec: Recorder, s: Settings, env_fn: Callable[[], Any], policy: Any) -> float:
    """frames/s of torchrl's single-process Collector on the sleeping env: a worker's ceiling."""
    collector = peers.torchrl_local_collector(env_fn, policy, frames_per_batch=s.steps_per_batch)
    try:
        it = iter(collector)
        next(it)
        frames, wall_s, _ = timed_batches(it, s.batches_per_worker)
    finally:
        collector.shutdown()
    fps = frames / wall_s
    config = f"torchrl Collector, no Ray, sleep_s={s.sleep_s}"
    rec.add(
        Measurement("one worker in the driver", 1, "frames_per_s", fps, "frames/s", config,
                    load_1m_now=load())
    )  # fmt: skip
    rec.add(
        Measurement("one worker in the driver", 1, "efficiency", fps * s.sleep_s, "x", config,
                    load_1m_now=load())
    )  # fmt: skip
    return fps


def load() -> float:
    return round(os.getloadavg()[0], 2)


def measure(
    rec: Recorder, s: Settings, impl: str, n: int, env_fn: Callable[[], Any], policy: Any,
    one_worker_fps: float,
) -> None:  # fmt: skip
    """One library at ``n`` workers: rates, driver CPU, and the projection; n/a if it fails."""
    config = f"{n} workers x 1 env, sleep_s={s.sleep_s}, fpb={s.steps_per_batch}, first-ready"
    log(f"{impl} | {config}")
    ideal = n / s.sleep_s
    batches = s.batches_per_worker * n
    results: dict[str, tuple[float | None, str]] = {"ideal_frames_per_s": (ideal, "frames/s")}
    note = ""
    try:
        with running(lambda: make_collector(impl, env_fn, policy, s, n), s.timeout_s) as (c, _):
            wait_ready(impl, c, s.timeout_s)  # every actor built: startup is not measured
            it = iter(c)
            for _ in range(n):  # warm-up: about one batch per worker
                next(it)
            frames, wall_s, cpu_s = timed_batches(it, batches)
        fps = frames / wall_s
        per_batch = cpu_s / batches
        results.update(
            frames_per_s=(fps, "frames/s"),
            efficiency=(fps / ideal, "x"),
            vs_one_worker=(fps / (n * one_worker_fps), "x"),
            driver_cpu_s_per_batch=(per_batch, "s"),
            driver_cpu_cores=(cpu_s / wall_s, "cores"),
            projected_workers_per_core=(1.0 / (per_batch * s.batches_per_s_per_worker), "workers"),
            batches=(batches, "batches"),
        )
    except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
        note = failure_note(err, log)
    settle()
    for metric in METRICS:
        value, unit = results.get(metric, (None, ""))
        rec.add(Measurement(impl, n, metric, value, unit, config, note, load_1m_now=load()))


def run(rec: Recorder, s: Settings) -> None:
    policy = mlp_policy(4, 2)
    env_fn = functools.partial(make_faulty_env, ENV_ID, sleep_s=s.sleep_s)
    measure_idle(rec)
    one = measure_one_worker(rec, s, env_fn, policy)
    for i, n in enumerate(s.workers):
        for impl in turn_order(IMPLS, i):
            measure(rec, s, impl, n, env_fn, policy, one)


def cell(m: Measurement) -> str:
    if m.value is None:
        return "n/a"
    if m.unit == "s":
        return f"{m.value * 1e3:.3g} ms"
    if m.unit in ("x", "cores"):
        return f"{m.value:.2f}" if m.unit == "x" else f"{m.value:.3f}"
    return f"{m.value:,.0f}"


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table: a row per (library, workers), a column per metric."""
    metrics = [x for x in METRICS if any(m.metric == x for m in ms)]
    table = [["impl", "workers", *(METRICS[x] for x in metrics), "load 1m", "note"]]
    for impl, n in dict.fromkeys((m.impl, m.workers) for m in ms):
        row = [m for m in ms if (m.impl, m.workers) == (impl, n)]
        by_metric = {m.metric: cell(m) for m in row}
        notes = "; ".join(dict.fromkeys(m.note for m in row if m.note))
        loads = f"{max(m.load_1m_now for m in row):.2f}"
        table.append([impl, str(n), *(by_metric.get(x, "") for x in metrics), loads, notes])
    return {"scale simulation": table}


TITLE = "Scale simulation: many sleeping workers on 2 CPUs, the driver's cost per worker"


def intro(s: Settings) -> str:
    return (
        f"Each worker steps one CartPole-v1 env that sleeps {s.sleep_s} s per step "
        f"(`make_faulty_env(sleep_s=...)`), `remote_configs={REMOTE_CONFIGS}`, "
        f"`frames_per_batch={s.steps_per_batch}`, `sync=False`, the 2x64 tanh MLP; "
        f"{s.batches_per_worker} batches per worker measured after the actors were built "
        "and one warm-up batch per worker. Ideal = workers / sleep_s; `vs W x one` = "
        "measured / (workers x the rate of one worker stepped in the driver without Ray); "
        "driver CPU counts every thread of the driver process, Ray's included (`Ray idle` "
        "is that with no collector); `workers/driver core (proj.)` = 1 / (driver CPU per "
        "batch x batches/s per worker). `load 1m`: the 1-minute load average when the row "
        "was recorded, just after its measurement (so it includes the actors' start). "
        "See the docstring of `benchmarks/scale_sim.py`."
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="workers 2,4, 3 batches per worker")
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (4,8,16)")
    parser.add_argument("--sleep-s", type=float, default=0.01, help="seconds each env step sleeps")
    parser.add_argument("--steps-per-batch", type=int, default=50, help="frames_per_batch")
    parser.add_argument(
        "--batches-per-worker", type=int, default=None, help="batches measured per worker (8)"
    )
    parser.add_argument("--out", default=None, help="also write a markdown section to this path")
    args = parser.parse_args(argv)
    default_workers = "2,4" if args.quick else "4,8,16"
    try:
        args.workers = tuple(int(x) for x in (args.workers or default_workers).split(",") if x)
    except ValueError:
        parser.error(f"--workers={args.workers}: comma-separated integers")
    if not args.workers or min(args.workers) < 1:
        parser.error("--workers: at least one count, each >= 1")
    if args.sleep_s <= 0 or args.steps_per_batch < 1:
        parser.error("--sleep-s must be > 0 and --steps-per-batch >= 1")
    if args.batches_per_worker is None:
        args.batches_per_worker = 3 if args.quick else 8
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    s = Settings(
        workers=args.workers, sleep_s=args.sleep_s, steps_per_batch=args.steps_per_batch,
        batches_per_worker=args.batches_per_worker,
    )  # fmt: skip
    return run_sections(
        functools.partial(run, s=s), tables=tables, out=args.out, title=TITLE,
        script="scale_sim.py", argv=argv, intro=intro(s),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
