"""Env configs on running workers: switch latency vs torchrl's rebuild, collection cost, memory.

``RayCollector.set_env_config`` sends a config (Pendulum's gravity here) with one
``ray.put``; each worker acknowledges it while it collects. torchrl's RayCollector has no
such call: the only way to change its envs' configuration is to build a new collector
(pytorch/rl#2896). Sections (one JSON line per measurement, with ``report.machine_info()``):

* ``switch``: time from ``set_env_config`` to every worker's acknowledgement
  (``wait_for_env_config``), p50 and p95 over ``--switches`` switches with ``--workers``
  workers collecting meanwhile; beside it, torchrl's rebuild: shutting its RayCollector
  down, building one with the new config and getting its first batch (``--rebuilds``).
* ``fps``: collection frames/s with a switch every second vs none (same collector,
  alternating windows of ``--fps-seconds``).
* ``memory``: the driver's RSS and the object store (objects, MiB) before and after
  ``--memory-switches`` switches: flat, as each switch's object is freed by the next.
* ``learning`` (``--learning``): a curriculum preset beside the same preset without its
  curriculum (``--learning-presets``; default ``ppo-mountaincar`` and
  ``ppo-mountaincar-curriculum``), the same frame budget and seeds, both evaluated at the
  hardest level (MountainCar-v0 as registered): the evaluation curves (``--plot``: a PNG,
  each seed thin and their median thick, the curriculum's level below) and the last return.

Run from the repository root: ``python benchmarks/env_config.py`` (``--quick`` for a short
check). On 2 CPUs the workers take ``num_cpus=0.5`` each.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from harness import json_line, stderr_log, turn_order
from report import machine_info, print_tables
from tensordict.nn import TensorDictModule

log = stderr_log("env_config")
GRAVITIES = (4.0, 6.0, 8.0, 10.0, 12.0)


def pendulum(g: float = 10.0, num_envs: int = 4) -> Any:
    """Pendulum copies that take ``{"g": ...}`` configs (and start at gravity ``g``)."""
    from tdscheme.envs.env_config import make_configurable_env

    return make_configurable_env("Pendulum-v1", num_envs=num_envs, g=g)


def policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


def tdscheme_collector(workers: int, frames_per_batch: int) -> Any:
    from tdscheme import RayCollector

    return RayCollector(
        pendulum, policy(), frames_per_batch=frames_per_batch, total_frames=-1,
        num_collectors=workers, remote_configs={"num_cpus": 0.5}, sync=False,
    )  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def record(section: str, impl: str, metric: str, value: Any, unit: str, **extra: Any) -> dict:
    row = {"section": section, "impl": impl, "metric": metric, "value": value, "unit": unit}
    row.update(extra)
    json_line({**row, **MACHINE})
    return row


# -- switch latency ----------------------------------------------------------------------------


def section_switch(args: argparse.Namespace) -> list[dict]:
    rows = []
    with tdscheme_collector(args.workers, 4 * 64) as collector:
        batches = iter(collector)
        next(batches)
        latencies = []
        for i in range(args.switches):
            start = time.perf_counter()
            version = collector.set_env_config({"g": GRAVITIES[i % len(GRAVITIES)]})
            collector.wait_for_env_config(version, timeout_s=60)
            latencies.append(time.perf_counter() - start)
            next(batches)  # the workers collect meanwhile: the acks come from busy workers
        ledger = collector.stats()["ledger"]
    config = f"{args.workers} workers collecting, {args.switches} switches"
    for q in (0.5, 0.95):
        ms = 1e3 * percentile(latencies, q)
        rows.append(record("switch", "tdscheme set_env_config", f"ack_p{round(q * 100)}_ms",
                           round(ms, 2), "ms", config=config, ledger_balanced=ledger["balanced"]))  # fmt: skip
    rows += torchrl_rebuilds(args)
    return rows


def torchrl_rebuilds(args: argparse.Namespace) -> list[dict]:
    from torchrl.collectors.distributed import RayCollector

    def build(g: float) -> Any:
        return RayCollector(
            [functools.partial(pendulum, g)] * args.workers, policy(), frames_per_batch=4 * 64,
            total_frames=2**40, num_collectors=args.workers, remote_configs={"num_cpus": 0.5},
            sync=False,
        )  # fmt: skip

    collector = build(GRAVITIES[0])
    next(iter(collector))
    rebuild_s, first_batch_s = [], []
    for i in range(args.rebuilds):
        start = time.perf_counter()
        collector.shutdown()
        collector = build(GRAVITIES[(i + 1) % len(GRAVITIES)])
        built = time.perf_counter()
        next(iter(collector))
        rebuild_s.append(built - start)
        first_batch_s.append(time.perf_counter() - start)
    collector.shutdown()
    config = f"{args.workers} workers, {args.rebuilds} rebuilds (shutdown + new collector)"
    return [
        record("switch", "torchrl rebuild", "rebuild_median_s", round(statistics.median(rebuild_s), 3),
               "s", config=config),
        record("switch", "torchrl rebuild", "to_first_batch_median_s",
               round(statistics.median(first_batch_s), 3), "s", config=config),
    ]  # fmt: skip


# -- collection with switches -------------------------------------------------------------------


def section_fps(args: argparse.Namespace) -> list[dict]:
    rates: dict[str, list[float]] = {"none": [], "every 1 s": []}
    with tdscheme_collector(args.workers, 4 * 128) as collector:
        batches = iter(collector)
        for _ in range(3):  # warm up
            next(batches)
        for rep in range(args.fps_reps):
            for mode in turn_order(list(rates), rep):
                frames, switches = 0, 0
                start = last = time.perf_counter()
                while (now := time.perf_counter()) - start < args.fps_seconds:
                    if mode != "none" and now - last >= 1.0:
                        collector.set_env_config({"g": GRAVITIES[switches % len(GRAVITIES)]})
                        switches, last = switches + 1, now
                    frames += next(batches).numel()
                rates[mode].append(frames / (time.perf_counter() - start))
                log(f"fps | {mode} | {rates[mode][-1]:.0f} frames/s, {switches} switches")
        ledger = collector.stats()["ledger"]
    none, switching = statistics.median(rates["none"]), statistics.median(rates["every 1 s"])
    config = f"{args.workers} workers, {args.fps_reps} x {args.fps_seconds:g} s windows"
    return [
        record("fps", "tdscheme", "frames_per_s_no_switch", round(none), "frames/s", config=config),
        record("fps", "tdscheme", "frames_per_s_switch_every_1s", round(switching), "frames/s",
               config=config, ratio_to_no_switch=round(switching / none, 3),
               ledger_balanced=ledger["balanced"]),
    ]  # fmt: skip


# -- memory -------------------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def object_store() -> tuple[float, int]:
    """(MiB, objects) in this Ray's object store."""
    import ray
    from ray._private.internal_api import memory_summary

    address = ray.get_runtime_context().gcs_address
    text = memory_summary(address=address, stats_only=True)
    found = re.search(r"Plasma memory usage (\d+) MiB, (\d+) objects", text)
    return (float(found.group(1)), int(found.group(2))) if found else (float("nan"), -1)


def section_memory(args: argparse.Namespace) -> list[dict]:
    with tdscheme_collector(args.workers, 4 * 64) as collector:
        next(iter(collector))
        samples = []
        for i in range(args.memory_switches + 1):
            if i % max(1, args.memory_switches // 4) == 0:
                mib, objects = object_store()
                samples.append((i, round(rss_mb(), 1), mib, objects))
                log(f"memory | {i} switches | rss {samples[-1][1]} MB, {objects} objects")
            if i < args.memory_switches:
                version = collector.set_env_config({"g": GRAVITIES[i % len(GRAVITIES)]})
                collector.wait_for_env_config(version, timeout_s=60)
    (_, rss0, mib0, obj0), (_, rss1, mib1, obj1) = samples[1], samples[-1]  # after warm-up
    config = f"{args.workers} workers, {args.memory_switches} switches"
    return [
        record("memory", "tdscheme", "driver_rss_growth_mb", round(rss1 - rss0, 1), "MB",
               config=config, samples=samples),
        record("memory", "tdscheme", "object_store_growth", obj1 - obj0, "objects", config=config,
               mib_before=mib0, mib_after=mib1),
    ]  # fmt: skip


# -- learning -----------------------------------------------------------------------------------


def section_learning(args: argparse.Namespace) -> list[dict]:
    from tdscheme.engine import read_metrics
    from tdscheme.presets import get_preset

    rows = []
    for name in args.learning_presets:
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="tds-curriculum-") as run_dir:
                preset = get_preset(name).override({
                    "total_frames": args.learning_frames, "seed": seed, "run_dir": run_dir,
                    "progress": False, "target_return": None, "num_collectors": 2,
                    "collector_resources": {"num_cpus": 0.5},
                    "eval_every_frames": args.learning_frames // 8,
                })  # fmt: skip
                start = time.perf_counter()
                with preset.build_trainer() as trainer:
                    summary = trainer.run()
                metrics = read_metrics(run_dir)
            curve = [(int(f), round(r, 1)) for f, r in metrics.get("eval/return", [])]
            levels = metrics.get("curriculum/level", [])
            rows.append(record(
                "learning", name, "eval_return", round(summary["eval_return"], 1), "return",
                seed=seed, frames=summary["frames"], seconds=round(time.perf_counter() - start),
                curve=curve, levels=[(int(f), int(v)) for f, v in levels],
                env_config=preset.algo.env_config,
            ))  # fmt: skip
    if args.plot:
        log(f"wrote {plot_learning(rows, args.plot)}")
    return rows


def plot_learning(rows: list[dict], path: str) -> str:
    """Evaluation return vs frames per preset (thin: a seed; thick: the median), levels below."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6), layout="constrained")
    FigureCanvasAgg(figure)  # the Agg canvas directly: pyplot's state left alone
    returns, levels = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    colors = {}
    for row in rows:
        color = colors.setdefault(row["impl"], f"C{len(colors)}")
        frames, values = zip(*row["curve"], strict=True) if row["curve"] else ((), ())
        returns.plot(frames, values, color=color, alpha=0.35, linewidth=1)
        if row["levels"]:
            level_frames, level = zip(*row["levels"], strict=True)
            levels.step(level_frames, level, where="post", color=color, alpha=0.5)
    for impl, color in colors.items():
        curves = [r["curve"] for r in rows if r["impl"] == impl and r["curve"]]
        length = min(map(len, curves), default=0)
        if length:
            frames = [f for f, _ in curves[0][:length]]
            median = np.median([[v for _, v in c[:length]] for c in curves], axis=0)
            returns.plot(frames, median, color=color, linewidth=2.5,
                         label=f"{impl} (median of {len(curves)})")  # fmt: skip
    returns.set(ylabel="evaluation return (hardest level)")
    returns.legend(fontsize=8)
    returns.grid(alpha=0.3)
    levels.set(xlabel="frames", ylabel="curriculum level")
    levels.grid(alpha=0.3)
    figure.savefig(path, format="png", dpi=90)
    return path


SECTIONS = {
    "switch": section_switch,
    "fps": section_fps,
    "memory": section_memory,
    "learning": section_learning,
}
MACHINE: dict[str, Any] = {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["switch", "fps", "memory"],
                        choices=sorted(SECTIONS))  # fmt: skip
    parser.add_argument("--learning", action="store_true", help="also run the learning section")
    parser.add_argument("--quick", action="store_true", help="a short check that it works")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--switches", type=int, default=100)
    parser.add_argument("--rebuilds", type=int, default=3)
    parser.add_argument("--fps-seconds", type=float, default=20.0)
    parser.add_argument("--fps-reps", type=int, default=2)
    parser.add_argument("--memory-switches", type=int, default=1000)
    parser.add_argument("--learning-frames", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--learning-presets",
        nargs="+",
        default=["ppo-mountaincar", "ppo-mountaincar-curriculum"],
    )
    parser.add_argument("--plot", help="the learning section's PNG (default: none)")
    args = parser.parse_args(argv)
    if args.quick:
        args.switches, args.rebuilds, args.fps_seconds = 30, 1, 6.0
        args.fps_reps, args.memory_switches = 1, 200
    sections = list(dict.fromkeys([*args.sections, *(["learning"] if args.learning else [])]))
    import ray

    from tdscheme.runtime import local_ray_config

    ray.init(**{**local_ray_config(), "log_to_driver": False})
    MACHINE.update(machine_info())
    rows = []
    try:
        for section in sections:
            log(f"section {section}")
            rows += SECTIONS[section](args)
    finally:
        ray.shutdown()
    table = [["section", "impl", "metric", "value"]]
    table += [[r["section"], r["impl"], r["metric"], f"{r['value']} {r['unit']}"] for r in rows]
    print_tables({"env configs on running workers": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
