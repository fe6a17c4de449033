"""Gradient workers benchmark: frames/s and learner updates/s for 1 vs 2 workers in each mode.

Everything runs in one process on one Ray (``num_cpus=2``, no dashboard); each
gradient worker actor gets ``{"num_cpus": 1}``; every coordinator is shut down
after its measurement. Run from the repository root::

    .venv/bin/python benchmarks/grad_workers.py                  # full run, a few minutes
    .venv/bin/python benchmarks/grad_workers.py --quick          # smoke test
    .venv/bin/python benchmarks/grad_workers.py --frames 40000 --out r.md

Sections (``--sections``, default all):

* ``throughput``: CartPole-v1 (gymnasium vector env of ``num_envs`` copies per
  collector), A2C with GAE (the ``a2c-cartpole`` preset's learner and networks, one
  hidden layer of 32 units, lr 3e-3, as this benchmark has always measured), the same
  ``frames_per_batch`` per gradient for every row. For ``synchronous``,
  ``asynchronous`` and ``decentralized`` gradient workers with 1 and 2 workers:
  frames trained on per second and learner updates per second over ``--frames``
  frames after ``warmup_steps`` steps, the seconds from construction to the end
  of the first step, and the mean ``wait_ms``/``apply_ms``/``dispatch_ms`` the
  coordinator reports. The peer row, ``in-process``, is one process (no Ray)
  collecting with the same collector and applying each gradient at once.

* ``time_to_475``: the ``ppo-cartpole-dd`` (2 decentralized gradient workers)
  and ``a3c-cartpole`` (2 asynchronous gradient workers) presets next to the
  single-learner ``ppo-cartpole``, each run once through the Trainer with its own
  settings (``workers`` is the number of gradient workers, 0 for the driver
  learner) until an evaluation (10 episodes, deterministic policy) returns 475 on
  average (``target_return``), at most ``target_budget_frames`` frames: wall
  seconds from building the Trainer (actors included) to that evaluation, the
  frames trained on by then, frames per second over the run, and the 1-minute load
  average when the run started. ``--quick`` only checks that each preset runs.

A new section is a function ``section_<name>(rec, settings)`` that calls
``rec.add(Measurement(...))``, registered in ``SECTIONS``; the tables group
measurements by section.

Output: one JSON line per measurement on stdout (with the machine and the
versions), then one table per section. ``--out`` writes the tables as a markdown
section for ``benchmarks/results/grad_workers.md`` (the latest figures go in
``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import stderr_log
from report import Recorder, parse_section_args, run_sections

from tdscheme.envs import make_env
from tdscheme.gradient_workers import (
    GradientWorker,
    GradientWorkersConfig,
    GradientWorkerSpec,
    build_gradient_coordinator,
)
from tdscheme.presets import get_preset

#: Coordinator timers (driver side), then the workers' own (mean per gradient).
TIMERS = ("wait_ms", "apply_ms", "dispatch_ms", "collect_ms", "compute_ms", "allreduce_ms")
MODES: dict[str, dict[str, Any]] = {
    "synchronous": {"communication": "synchronous"},
    "asynchronous": {"communication": "asynchronous"},
    "decentralized": {"communication": "synchronous", "decentralized": True},
}


@dataclass(frozen=True)
class Settings:
    """What one run measures."""

    frames: int = 40_000
    warmup_steps: int = 2
    min_steps: int = 5
    frames_per_batch: int = 1024
    num_envs: int = 8
    workers: tuple[int, ...] = (1, 2)
    timeout_s: float = 300.0
    target_budget_frames: int = 300_000

    @classmethod
    def quick(cls, frames: int | None) -> Settings:
        """Tiny counts: a smoke test."""
        return cls(frames=frames or 2_048, warmup_steps=1, min_steps=2, frames_per_batch=256,
                   target_budget_frames=4_096)  # fmt: skip


@dataclass
class Measurement:
    """One JSON line."""

    section: str
    impl: str
    workers: int
    metric: str
    value: float | None
    unit: str
    note: str = ""


log = stderr_log("grad_workers")


# ---------------------------------------------------------------- throughput


def env_factory(s: Settings) -> Callable[[], Any]:
    return functools.partial(make_env, "CartPole-v1", num_envs=s.num_envs)


def a2c_factories() -> tuple[Callable[[], Any], Callable[..., Any]]:
    """The ``a2c-cartpole`` preset's ``(policy_factory, learner_factory)``, 32 hidden units."""
    preset = get_preset("a2c-cartpole").override({"hidden_sizes": (32,), "lr": 3e-3})
    return preset.policy_factory(), preset.learner_factory()


def run_steps(step: Callable[[], dict[str, float]], s: Settings) -> dict[str, float]:
    """Steps until ``s.frames`` frames (and ``s.min_steps`` steps); returns rates and timers."""
    frames = updates = steps = 0.0
    timers = dict.fromkeys(TIMERS, 0.0)
    start = time.perf_counter()
    while frames < s.frames or steps < s.min_steps:
        metrics = step()
        frames += metrics["frames"]
        updates += metrics["updates"]
        steps += 1
        for key in timers:
            timers[key] += metrics.get(key, 0.0)
    elapsed = time.perf_counter() - start
    out = {"frames/s": frames / elapsed, "updates/s": updates / elapsed}
    out.update({key: value / steps for key, value in timers.items() if value})
    return out


def measure_mode(rec: Recorder, s: Settings, mode: str, workers: int) -> None:
    config = GradientWorkersConfig(
        num_grad_workers=workers,
        frames_per_batch=s.frames_per_batch,
        worker_resources={"num_cpus": 1},
        seed=0,
        timeout_s=s.timeout_s,
        **MODES[mode],
    )
    policy_factory, learner_factory = a2c_factories()
    started = time.perf_counter()
    with build_gradient_coordinator(
        config,
        env_factory=env_factory(s),
        policy_factory=policy_factory,
        learner_factory=learner_factory,
        learner=learner_factory(**policy_factory()),
    ) as coordinator:
        coordinator.step()
        first_s = time.perf_counter() - started
        for _ in range(s.warmup_steps - 1):
            coordinator.step()
        rates = run_steps(coordinator.step, s)
    record(rec, mode, workers, rates, first_s)


def measure_in_process(rec: Recorder, s: Settings) -> None:
    policy_factory, learner_factory = a2c_factories()
    spec = GradientWorkerSpec(
        env_factory(s), policy_factory, learner_factory, frames_per_batch=s.frames_per_batch
    )
    started = time.perf_counter()
    worker = GradientWorker(0, spec, seed=0)

    def step() -> dict[str, float]:
        result = worker.compute_gradients()
        worker.apply_gradients(result.grads)
        return {"frames": float(result.frames), "updates": 1.0, **result.timings_ms}

    try:
        step()
        first_s = time.perf_counter() - started
        for _ in range(s.warmup_steps - 1):
            step()
        rates = run_steps(step, s)
    finally:
        worker.shutdown()
    record(rec, "in-process", 1, rates, first_s)


def record(rec: Recorder, impl: str, workers: int, rates: dict[str, float], first_s: float) -> None:
    for metric, value in rates.items():
        unit = "ms" if metric.endswith("_ms") else metric
        rec.add(Measurement("throughput", impl, workers, metric, value, unit))
    rec.add(Measurement("throughput", impl, workers, "first_step_s", first_s, "s"))


def section_throughput(rec: Recorder, s: Settings) -> None:
    log("in-process peer")
    measure_in_process(rec, s)
    for mode in MODES:
        for workers in s.workers:
            log(f"{mode}, {workers} worker(s)")
            try:
                measure_mode(rec, s, mode, workers)
            except Exception as err:  # noqa: BLE001 - reported as n/a, the run goes on
                rec.add(Measurement("throughput", mode, workers, "frames/s", None, "frames/s",
                                    note=f"{type(err).__name__}: {err}"[:200]))  # fmt: skip


# ---------------------------------------------------------------- time to 475

#: Presets compared to a return of 475, single learner first.
TARGET_PRESETS = ("ppo-cartpole", "ppo-cartpole-dd", "a3c-cartpole")
TARGET_RETURN = 475.0


def measure_time_to_target(rec: Recorder, s: Settings, name: str) -> None:
    from tdscheme.presets import get_preset  # the engine is only needed by this section

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tds-bench-") as run_dir:
        preset = get_preset(name).override(
            {"target_return": TARGET_RETURN, "total_frames": s.target_budget_frames,
             "run_dir": run_dir, "progress": False, "checkpoint_at_end": False}
        )  # fmt: skip
        workers = preset.scheme.num_grad_workers
        with preset.build_trainer() as trainer:
            summary = trainer.run()
    reached = summary["target_reached"]
    note = "" if reached else f"not reached in {summary['frames']} frames"
    add = functools.partial(Measurement, "time_to_475", name, workers)
    rec.add(add("wall_to_475_s", summary["target_elapsed_s"] if reached else None, "s", note))
    rec.add(add("frames_to_475", summary["target_frames"] if reached else None, "frames"))
    rec.add(add("frames/s", summary["frames"] / summary["elapsed_s"], "frames/s"))
    rec.add(add("final_eval_return", summary["eval_return"], "return"))
    rec.add(add("load_1min", load, "load"))


def section_time_to_475(rec: Recorder, s: Settings) -> None:
    for name in TARGET_PRESETS:
        log(f"{name} to a return of {TARGET_RETURN:g}")
        try:
            measure_time_to_target(rec, s, name)
        except Exception as err:  # noqa: BLE001 - reported as n/a, the run goes on
            rec.add(Measurement("time_to_475", name, 0, "wall_to_475_s", None, "s",
                                note=f"{type(err).__name__}: {err}"[:200]))  # fmt: skip


SECTIONS: dict[str, Callable[[Recorder, Settings], None]] = {
    "throughput": section_throughput,
    "time_to_475": section_time_to_475,
}


# ---------------------------------------------------------------- tables


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table per section: a row per implementation and worker count, a column per metric."""
    out: dict[str, list[list[str]]] = {}
    for section in dict.fromkeys(m.section for m in ms):
        rows = [m for m in ms if m.section == section]
        metrics = list(dict.fromkeys(m.metric for m in rows))
        keys = list(dict.fromkeys((m.impl, m.workers) for m in rows))
        base = {m.impl: m.value for m in rows if m.workers == 1 and m.metric == "frames/s"}
        table = [["impl", "workers", *metrics, "frames/s vs 1 worker"]]
        for impl, workers in keys:
            values = {m.metric: m for m in rows if (m.impl, m.workers) == (impl, workers)}
            cells = [fmt(values[k].value) if k in values else "" for k in metrics]
            fps, one = values.get("frames/s"), base.get(impl)
            ratio = f"{fps.value / one:.2f}x" if fps and fps.value and one else ""
            notes = "; ".join(v.note for v in values.values() if v.note)
            table.append([impl, str(workers), *cells, ratio + (f" ({notes})" if notes else "")])
        out[section] = table
    return out


def intro(s: Settings) -> str:
    """The paragraph above the tables: what was run and what the columns mean."""
    return (
        f'One Ray (`num_cpus=2`), `{{"num_cpus": 1}}` per gradient worker; CartPole-v1 '
        f"({s.num_envs} vector envs per collector), A2C + GAE, {s.frames_per_batch} frames per "
        f"gradient; rates over {s.frames} frames after {s.warmup_steps} warm-up step(s); "
        "`first_step_s` includes starting the actors; `wait_ms`, `apply_ms`, `dispatch_ms` are "
        "the coordinator's mean milliseconds per event, `collect_ms`, `compute_ms`, "
        "`allreduce_ms` the workers' mean per gradient (the all-reduce includes waiting for "
        "the slower peer). `in-process` is the same collector and learner in one "
        "process without Ray. See the docstring of `benchmarks/grad_workers.py`."
    )


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_section_args(
        __doc__.split("\n")[0], list(SECTIONS), "frames measured per row after the warm-up "
        "(default 40000, 2048 with --quick)", argv,
    )  # fmt: skip
    s = Settings.quick(args.frames) if args.quick else Settings(frames=args.frames or 40_000)

    def run(rec: Recorder) -> None:
        for section in args.sections:
            SECTIONS[section](rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title="Gradient workers: 1 vs 2 workers in each mode",
        script="grad_workers.py", argv=argv, intro=lambda: intro(s),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
