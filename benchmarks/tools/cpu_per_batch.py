"""Where the machine's CPU goes per batch over Ray: tdscheme's collector against the hand-written.

On a 2-core machine a collector's rate is the cores' busy time divided by what one
batch costs all processes together, so a ratio of rates is (nearly) the inverse
ratio of CPU per batch. This script says where that CPU goes. It runs
``paired_rounds.py``'s workloads (the same collectors, the same one Ray of
``num_cpus=2``, 2 workers, first-ready order), each side in turn for ``--rounds``
rounds (tdscheme first in even rounds), and over ``--seconds`` of iteration after 5
warm-up batches reads from ``/proc``:

* the CPU seconds of the worker actors' processes, of the driver (this process, Ray's
  threads in it included) and of every other process (Ray's raylet and GCS;
  on a quiet machine nothing else), each divided by the batches the driver received;
* the machine's busy and idle time (``/proc/stat``): idle is time no process wanted.

Both sides' batches hold the same env steps in these workloads (``frames_per_batch``),
so the per-batch costs compare directly. Per workload and side: the median of the
rounds (and the range of the busy time). Linux only (``/proc``).

Run from the repository root::

    .venv/bin/python benchmarks/tools/cpu_per_batch.py --workloads next_step_index --out section.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import harness
import paired_rounds  # benchmarks/tools/, beside this script
from collection_runs import Measurement, failure, running
from report import Recorder, run_sections

HZ = os.sysconf("SC_CLK_TCK")
#: the parts of a batch's CPU, in the table's order
PARTS = ("busy", "workers", "driver", "others")
DEFAULT_WORKLOADS = ("next_step_index", "next_step_native", "disabled")


def process_cpu() -> dict[int, float]:
    """pid -> CPU seconds (user + system) of every process this user can read."""
    cpu = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / HZ
    return cpu


def machine_cpu() -> tuple[float, float]:
    """``(busy, idle)`` CPU seconds of the whole machine since boot (``/proc/stat``)."""
    with open("/proc/stat") as f:
        values = [int(x) / HZ for x in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, idle


def split_cpu(
    before: dict[int, float], after: dict[int, float], workers: set[int], driver: int
) -> dict[str, float]:
    """CPU seconds between two :func:`process_cpu` readings, by part (workers, driver, others).

    A process that started in between counts from zero; one that ended is left out.
    """
    parts = dict.fromkeys(("workers", "driver", "others"), 0.0)
    for pid, seconds in after.items():
        spent = seconds - before.get(pid, 0.0)
        part = "driver" if pid == driver else "workers" if pid in workers else "others"
        parts[part] += spent
    return parts


def measure_once(rec: Recorder, name: str, impl: str, config: str, seconds: float) -> None:
    """One side of one round: frames/s, batches and the CPU per batch by part (see the module)."""
    row = dict(section=name, impl=impl, env=paired_rounds.ENV_IDS.get(name, paired_rounds.ENV_ID),
               order="first-ready", config=config)  # fmt: skip
    values: dict[str, float | None] = {m: None for m in ("frames_per_s", *PARTS, "idle")}
    note = ""
    try:
        with running(paired_rounds.workload(name)[impl], 240.0) as (collector, _):
            it: Iterator[Any] = iter(collector)
            for _ in range(5):
                next(it)
            workers = {harness.actor_pid(actor) for actor in collector.workers}  # both sides'
            procs, (busy0, idle0) = process_cpu(), machine_cpu()
            start, batches, frames = time.perf_counter(), 0, 0
            while time.perf_counter() - start < seconds or batches < 3:
                frames += harness.frames_in(next(it))
                batches += 1
            elapsed = time.perf_counter() - start
            busy1, idle1 = machine_cpu()
            parts = split_cpu(procs, process_cpu(), workers, os.getpid())
        values["frames_per_s"] = frames / elapsed
        values["busy"] = 1e3 * (busy1 - busy0) / batches
        values.update({part: 1e3 * s / batches for part, s in parts.items()})
        values["idle"] = 100 * (idle1 - idle0) / max(busy1 - busy0 + idle1 - idle0, 1e-9)
    except Exception as err:  # noqa: BLE001 - reported as n/a with its error
        note = failure(err)
    harness.settle()
    units = {"frames_per_s": "frames/s", "idle": "%"}
    for metric, value in values.items():
        rec.add(Measurement(**row, metric=metric, value=value,
                            unit=units.get(metric, "ms CPU per batch"), note=note))  # fmt: skip


def summary(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One row per workload and side: medians over the rounds (see the module)."""
    header = ["workload", "impl", "rounds", "frames/s", "busy ms per batch (range)",
              "workers ms", "driver ms", "others ms", "idle %", "busy vs hand-written"]  # fmt: skip
    table = [header]
    ms = [m for m in ms if m.config.startswith("round ")]
    median_busy: dict[tuple[str, str], float] = {}
    rows = []
    for name in dict.fromkeys(m.section for m in ms):
        for impl in ("tdscheme", paired_rounds.HAND):
            by = {metric: [m.value for m in ms if m.section == name and m.impl == impl
                           and m.metric == metric and m.value is not None]
                  for metric in ("frames_per_s", *PARTS, "idle")}  # fmt: skip
            if not by["busy"]:
                rows.append((name, impl, None))
                continue
            median_busy[name, impl] = statistics.median(by["busy"])
            rows.append((name, impl, by))
    for name, impl, by in rows:
        if by is None:
            table.append([name, impl, "0", *["n/a"] * 7])
            continue
        med = {metric: statistics.median(values) for metric, values in by.items()}
        hand = median_busy.get((name, paired_rounds.HAND))
        table.append([
            name, impl, str(len(by["busy"])), f"{med['frames_per_s']:,.0f}",
            f"{med['busy']:.2f} ({min(by['busy']):.2f}-{max(by['busy']):.2f})",
            f"{med['workers']:.2f}", f"{med['driver']:.2f}", f"{med['others']:.2f}",
            f"{med['idle']:.0f}", f"{med['busy'] / hand:.3f}x" if hand else "n/a",
        ])  # fmt: skip
    return {"CPU per batch": table}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated subset of {','.join(paired_rounds.FRAMES)}")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds per workload (default 3)")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds measured per side")
    parser.add_argument("--out", default=None, help="also write the table as a markdown section")
    args = parser.parse_args(argv)
    names = [x.strip() for x in args.workloads.split(",") if x.strip()]
    if not names or set(names) - set(paired_rounds.FRAMES):
        parser.error(f"--workloads={args.workloads!r}: accepted: {','.join(paired_rounds.FRAMES)}")
    if args.rounds < 1 or args.seconds <= 0:
        parser.error(f"--rounds={args.rounds}, --seconds={args.seconds}: must be positive")

    def run(rec: Recorder) -> None:
        for name in names:
            sides = ["tdscheme", paired_rounds.HAND]
            # a fresh Ray's first collector runs slower, whichever it is: one warm-up each
            for impl in sides[::-1]:
                measure_once(rec, name, impl, "warm-up", min(args.seconds, 5.0))
            for r in range(args.rounds):
                for impl in harness.turn_order(sides, r):
                    measure_once(rec, name, impl, f"round {r}", args.seconds)

    harness.benchmarks_on_pythonpath()  # the collectors' workers import peers by name
    return run_sections(
        run, tables=summary, out=args.out, argv=argv, script="tools/cpu_per_batch.py",
        title="CPU per batch over Ray: tdscheme vs the hand-written Ray collector",
        intro="\n\n".join(__doc__.split("\n\n")[1:4]),  # the description, its list kept
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
