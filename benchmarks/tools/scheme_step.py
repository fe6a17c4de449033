"""A Scheme step's driver overhead from its collector stats: ``stats()`` (pings) vs ``counters()``.

``RayCollector.stats()`` pings every worker (torchrl's ``workers_alive``);
``RayCollector.counters()`` reads the driver's own counters, refreshing
``workers_alive`` by a ping at most every ``alive_max_age_s`` seconds. The drivers
call ``counters()`` at each step. On a small ppo-cartpole Scheme (2 collectors, 4
envs each, 256-frame batches), this times 50 calls of each directly (median ms), and
``--steps`` Scheme steps with each call in the step (median ms per step). Run from the
repository root::

    .venv/bin/python benchmarks/tools/scheme_step.py
    .venv/bin/python benchmarks/tools/scheme_step.py --steps 30 --calls 100
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

from harness import seconds
from report import Recorder  # benchmarks/report.py

from tdscheme import Scheme
from tdscheme.presets import get_preset


@dataclasses.dataclass
class Measurement:
    """One timing: ``what`` was timed ``count`` times; the median and mean in milliseconds."""

    what: str
    count: int
    median_ms: float
    mean_ms: float
    num_collectors: int


def timed(call: Callable[[], object], count: int) -> list[float]:
    """Milliseconds of ``count`` calls of ``call``."""
    return [1e3 * seconds(call) for _ in range(count)]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="Scheme steps timed per variant")
    parser.add_argument("--calls", type=int, default=50, help="direct calls timed per method")
    parser.add_argument("--num-collectors", type=int, default=2)
    args = parser.parse_args(argv)
    preset = get_preset("ppo-cartpole").override(
        {"num_envs": 4, "frames_per_batch": 256, "minibatch_size": 128, "num_epochs": 2,
         "num_collectors": args.num_collectors, "collector_resources": {"num_cpus": 0.5}}
    )  # fmt: skip
    recorder = Recorder()

    def add(what: str, times: list[float]) -> None:
        recorder.add(
            Measurement(
                what,
                len(times),
                statistics.median(times),
                statistics.mean(times),
                args.num_collectors,
            )  # fmt: skip
        )

    with Scheme(**preset.factories(), config=preset.scheme) as scheme:
        collector = scheme.collector
        for _ in range(3):  # warm-up: workers started, first batches in
            scheme.step()
        add("collector.stats(timeout=1.0)", timed(lambda: collector.stats(timeout=1.0), args.calls))
        add("collector.counters()", timed(collector.counters, args.calls))
        add("Scheme.step (counters)", timed(scheme.step, args.steps))
        # the drivers' call before: a ping of every worker at each step
        collector.counters = lambda **_: collector.stats(timeout=1.0)  # type: ignore[method-assign]
        add("Scheme.step (stats, as before)", timed(scheme.step, args.steps))
    print(f"\n{'what':36} {'count':>5} {'median ms':>10} {'mean ms':>10}")
    for m in recorder.measurements:
        print(f"{m.what:36} {m.count:>5} {m.median_ms:>10.3f} {m.mean_ms:>10.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
