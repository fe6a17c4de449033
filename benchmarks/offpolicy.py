"""Off-policy training (issue 11): tdscheme against a plain torchrl loop and torchrl's Ray path.

Sections (``--sections``, all by default):

* ``sac``: SAC on Pendulum-v1 to a mean evaluation return of -200, side by side per seed:
  ``tdscheme`` (the ``sac-pendulum`` preset through :class:`tdscheme.engine.Trainer`: Ray
  collector workers collect in the background into the driver's replay buffer while the
  learner trains), ``torchrl`` (the plain single-process loop of ``offpolicy_loops.py``:
  Collector + ReplayBuffer(LazyTensorStorage) + SACLoss + SoftUpdate, collection and
  learning alternating) and ``torchrl-ray`` (torchrl's own
  ``RayCollector(replay_buffer=RayReplayBuffer(...))`` + ``start()``, the learner sampling
  on the driver). Same hyperparameters, read from the preset; wall time from the start of
  each run (networks, envs and Ray workers built; Ray itself already up for both Ray runs)
  to the evaluation that reached the target;
* ``dqn``, ``td3``: ``dqn-cartpole`` to 475 and ``td3-pendulum`` to -200, frames and wall
  time per seed, tdscheme and the plain loop;
* ``background``: collection frames/s into a Ray-held buffer while a SAC learner trains
  on its samples on the driver, and the learner's updates/s: tdscheme's
  ``RayCollector(replay_buffer=...).start()`` vs torchrl's, same envs, policy and buffer;
* ``buffer``: replay extend and sample throughput, local and Ray-held (``replay.py``'s).
* ``prefetch``: the ``sac-pendulum`` learner's updates/s sampling a filled Ray-held buffer
  (no collection) through tdscheme's ``BoundedRayBuffer`` without and with its sample
  prefetch (``prefetch=0`` / ``1``: the next sample asked for while the learner computes),
  alternating, ``--repeats`` times (5 by default) after a warm-up.

Run from the repository root::

    .venv/bin/python benchmarks/offpolicy.py --seeds 0,1,2 --out section.md
    .venv/bin/python benchmarks/offpolicy.py --quick        # about a minute, no target

Output: one JSON line per run (with machine and versions), then the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
import tempfile
import time
from typing import Any

import ray
import torch
from harness import json_line, paired_ratios, turn_order, wait_until
from offpolicy_loops import Hyper, Learning, frames_written, run_plain, run_torchrl_ray
from report import machine_info, write_text_section

from tdscheme.presets import PRESETS

SECTIONS = ("sac", "dqn", "td3", "background", "buffer", "prefetch")
PRESET_OF = {"sac": "sac-pendulum", "dqn": "dqn-cartpole", "td3": "td3-pendulum"}
QUICK = {"total_frames": 1024, "init_random_frames": 512, "eval_every_frames": 512,
         "target_return": 1e9}  # fmt: skip


def hyper_from_preset(preset: Any) -> Hyper:
    """The preset's loop settings as the plain loops' :class:`Hyper` (networks, loss and
    target updates come from the preset itself, see ``Learning.from_preset``)."""
    a, s, t = preset.algo, preset.scheme, preset.trainer
    return Hyper(
        algo=preset.algo_name, env_id=a.env_id, num_envs=a.num_envs, lr=a.lr,
        hidden=a.hidden_sizes[0], depth=len(a.hidden_sizes),
        batch_size=a.batch_size, utd_ratio=s.utd_ratio, frames_per_batch=s.frames_per_batch,
        init_random_frames=s.init_random_frames, buffer_size=a.buffer_size, gamma=a.gamma,
        total_frames=t.total_frames, eval_every_frames=t.eval_every_frames,
        eval_episodes=t.eval_episodes,
        target_return=t.target_return if t.target_return is not None else float("inf"),
        num_threads=t.num_threads or 1, seed=s.seed or 0,
    )  # fmt: skip


def run_tdscheme(preset: Any) -> dict[str, Any]:
    """The preset through the Trainer, to its target; frames, seconds and the scheme's rates."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        preset = preset.override({"run_dir": run_dir, "progress": False,
                                  "checkpoint_at_end": False, "eval_at_end": False})  # fmt: skip
        with preset.build_trainer() as trainer:
            summary = trainer.run()
    return {
        "frames": summary["target_frames"] or summary["frames"],
        "wall_s": summary["target_elapsed_s"] or (time.perf_counter() - start),
        "reached": bool(summary["target_reached"]),
        "eval_return": summary["eval_return"],
    }


def preset_for(section: str, seed: int, overrides: dict[str, Any]) -> Any:
    """The section's preset with ``overrides`` and ``seed``."""
    name = PRESET_OF[section]
    if name in PRESETS:
        build = PRESETS[name]
    else:  # presets not registered yet in this checkout
        from tdscheme.presets import offpolicy

        build = getattr(offpolicy, name.replace("-", "_"))
    return build().override({**overrides, "seed": seed})


def section_runs(section: str, runs: list[str], seeds: list[int], overrides: dict[str, Any],
                 rows: list[dict[str, Any]]) -> None:  # fmt: skip
    """Each run once per seed, one JSON line each."""
    for seed in seeds:
        preset = preset_for(section, seed, overrides)
        h = hyper_from_preset(preset)
        for run in runs:
            if run == "tdscheme":
                result = run_tdscheme(preset)
            elif run == "torchrl":
                result = run_plain(h, preset)
            else:
                result = run_torchrl_ray(
                    h, preset, weight_push_interval=preset.scheme.weight_push_interval,
                    num_collectors=preset.scheme.num_collectors,
                )  # fmt: skip
            row = {"section": section, "run": run, "seed": seed, **result}
            rows.append(row)
            json_line({**row, "hyper": dataclasses.asdict(h), "machine": machine_info()})


def section_background(rows: list[dict[str, Any]], preset: Any, window_s: float) -> None:
    """Frames written/s by background collection while a SAC learner trains; updates/s."""
    from torchrl.collectors.distributed import RayCollector as TorchrlRayCollector
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme import RayCollector

    h = hyper_from_preset(preset)
    for impl in ("tdscheme", "torchrl"):
        learning = Learning.from_preset(preset, h)
        ndim = 2 if h.num_envs > 1 else 1
        buffer = RayReplayBuffer(storage=functools.partial(LazyTensorStorage, 1_000_000, ndim=ndim),
                                 batch_size=h.batch_size, remote_config={"num_cpus": 0})  # fmt: skip
        cls = RayCollector if impl == "tdscheme" else TorchrlRayCollector
        collector = cls(preset.env_factory(), learning.ray_policy, frames_per_batch=h.frames_per_batch,
                        total_frames=2**40, num_collectors=1, replay_buffer=buffer,
                        remote_configs={"num_cpus": 1})  # fmt: skip

        def written(buffer: Any = buffer) -> int:
            return frames_written(buffer, h.num_envs)

        try:
            collector.start()
            wait_until(lambda buffer=buffer: len(buffer) >= h.batch_size, 180.0)
            learning.train(buffer.sample, 20)  # warm-up
            frames0, updates0, t0 = written(), learning.updates, time.perf_counter()
            while time.perf_counter() - t0 < window_s:
                learning.train(buffer.sample, 10)
            elapsed = time.perf_counter() - t0
            row = {"section": "background", "run": impl,
                   "frames_per_s": (written() - frames0) / elapsed,
                   "updates_per_s": (learning.updates - updates0) / elapsed}  # fmt: skip
            rows.append(row)
            json_line({**row, "machine": machine_info()})
        finally:
            if impl == "tdscheme":
                collector.shutdown()
            else:
                import asyncio

                asyncio.run(collector.async_shutdown())
            buffer.shutdown()
            learning.eval_env.close()


def section_buffer(rows: list[dict[str, Any]], quick: bool) -> None:
    """``replay.py``'s buffer section: extend and sample throughput, local and Ray-held."""
    from replay import Settings
    from replay import section_buffer as replay_buffer_section
    from report import Recorder

    rec = Recorder()
    replay_buffer_section(rec, Settings.quick(None) if quick else Settings())
    for m in rec.measurements:
        row = {"section": "buffer", "run": m.impl, "metric": m.metric, "value": m.value}
        rows.append(row)
        json_line({**row, "machine": machine_info()})


def section_prefetch(rows: list[dict[str, Any]], preset: Any, repeats: int, updates: int) -> None:
    """Learner updates/s on a Ray-held buffer, samples prefetched or not, alternating."""
    from tdscheme.replay.bounded import BoundedRayBuffer

    preset = preset.override({"buffer_location": "ray"})
    factories = preset.factories()
    learner = factories["learner_factory"](**factories["policy_factory"]())
    buffer, env = factories["storage_factory"](), factories["env_factory"]()
    try:
        rollout = env.rollout(200, break_when_any_done=False)
        for _ in range(10):
            buffer.extend(rollout)
        for repeat in range(repeats):
            for prefetch in turn_order((0, 1), repeat):
                bounded = BoundedRayBuffer(buffer, 60.0, prefetch=prefetch)
                for _ in range(20):  # warm-up
                    learner.replay_update(bounded)
                start = time.perf_counter()
                for _ in range(updates):
                    learner.replay_update(bounded)
                row = {"section": "prefetch", "run": f"prefetch={prefetch}", "repeat": repeat,
                       "updates_per_s": updates / (time.perf_counter() - start)}  # fmt: skip
                rows.append(row)
                json_line({**row, "machine": machine_info()})
    finally:
        env.close()
        buffer.shutdown()


def prefetch_table(rows: list[dict[str, Any]]) -> list[str]:
    """Updates/s per repeat, medians, the ratio of medians and the median of the ratios."""
    by = {p: [r["updates_per_s"] for r in rows if r["run"] == f"prefetch={p}"] for p in (0, 1)}
    out = ["", "| prefetch | updates/s per repeat | median |", "|---|---|---|"]
    for p, values in by.items():
        out.append(f"| {p} | {', '.join(f'{v:.0f}' for v in values)} | "
                   f"{statistics.median(values):.1f} |")  # fmt: skip
    r = paired_ratios(by[1], by[0])
    out.append(f"\nprefetch=1 / prefetch=0: ratio of medians {r.ratio_of_medians:.2f}x, median "
               f"of the per-repeat ratios {r.median_of_ratios:.2f}x "
               f"(range {r.low:.2f}x-{r.high:.2f}x)")  # fmt: skip
    return out


def per_seed_ratio(runs: list[dict[str, Any]], section: str, run: str) -> str:
    """The median over seeds of ``run``'s wall time over the plain loop's on the same seed."""
    plain = {
        r["seed"]: r["wall_s"] for r in runs if r["section"] == section and r["run"] == "torchrl"
    }
    ratios = [
        r["wall_s"] / plain[r["seed"]]
        for r in runs
        if r["section"] == section and r["run"] == run and r["seed"] in plain
    ]
    if run == "torchrl" or not ratios:
        return ""
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}x-{max(ratios):.2f}x)"


def tables(rows: list[dict[str, Any]]) -> str:
    """Markdown: every run, medians per section and run, ratios against the plain loop."""
    out = []
    runs = [r for r in rows if r["section"] in PRESET_OF]
    if runs:
        out += ["| section | run | seed | reached | frames | wall s | eval return |",
                "|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in runs:
            ret = "n/a" if r["eval_return"] is None else f"{r['eval_return']:.0f}"
            out.append(f"| {r['section']} | {r['run']} | {r['seed']} | {r['reached']} | "
                       f"{r['frames']:,} | {r['wall_s']:.1f} | {ret} |")  # fmt: skip
        out += ["", "| section | run | reached | median frames | median wall s | max wall s | "
                "wall vs torchrl (plain): ratio of medians | median of per-seed ratios |",
                "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for section in dict.fromkeys(r["section"] for r in runs):
            names = dict.fromkeys(r["run"] for r in runs if r["section"] == section)
            medians = {
                run: statistics.median(
                    r["wall_s"] for r in runs if r["section"] == section and r["run"] == run
                )
                for run in names
            }  # every run's first: a run listed before the plain loop gets its ratio too
            for run in names:
                mine = [r for r in runs if r["section"] == section and r["run"] == run]
                plain = medians.get("torchrl")
                ratio = f"{medians[run] / plain:.2f}x" if plain and run != "torchrl" else ""
                out.append(
                    f"| {section} | {run} | {sum(r['reached'] for r in mine)}/{len(mine)} | "
                    f"{statistics.median(r['frames'] for r in mine):,.0f} | {medians[run]:.1f} "
                    f"| {max(r['wall_s'] for r in mine):.1f} | {ratio} | "
                    f"{per_seed_ratio(runs, section, run)} |"
                )
    bg = [r for r in rows if r["section"] == "background"]
    if bg:
        out += ["", "| background | frames written/s | learner updates/s |", "|---|---|---|"]
        out += [f"| {r['run']} | {r['frames_per_s']:,.0f} | {r['updates_per_s']:,.1f} |"
                for r in bg]  # fmt: skip
    buf = [r for r in rows if r["section"] == "buffer"]
    if buf:
        out += ["", "| buffer | metric | frames/s |", "|---|---|---|"]
        out += [f"| {r['run']} | {r['metric']} | {r['value']:,.0f} |" for r in buf]
    prefetch = [r for r in rows if r["section"] == "prefetch"]
    if prefetch:
        out += prefetch_table(prefetch)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--runs", default="tdscheme,torchrl,torchrl-ray",
                        help="runs, comma-separated (torchrl-ray: the sac section only)")  # fmt: skip
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--quick", action="store_true", help="tiny budgets, no target")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="preset overrides for every run, e.g. utd_ratio=0.5")  # fmt: skip
    parser.add_argument("--window-s", type=float, default=30.0, help="background window")
    parser.add_argument("--repeats", type=int, default=5, help="prefetch: alternating repeats")
    parser.add_argument("--out", help="write the tables as a markdown section to this file")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    for name in sections:
        if name not in SECTIONS:
            parser.error(f"argument --sections: {name!r} is invalid; accepted: {SECTIONS}")
    seeds = [int(s) for s in args.seeds.split(",")]
    overrides = {k: json.loads(v) for k, _, v in (p.partition("=") for p in args.set)}
    if args.quick:
        overrides = {**QUICK, **overrides}
    torch.set_num_threads(1)
    for attempt in range(3):  # a loaded machine can time Ray's node start-up out
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            if attempt == 2:
                raise
            ray.shutdown()
    rows: list[dict[str, Any]] = []
    try:
        for section in sections:
            if section in PRESET_OF:
                runs = [r for r in args.runs.split(",") if section == "sac" or r != "torchrl-ray"]
                section_runs(section, runs, seeds, overrides, rows)
            elif section == "background":
                preset = preset_for("sac", seeds[0], overrides)
                section_background(rows, preset, 5.0 if args.quick else args.window_s)
            elif section == "prefetch":
                preset = preset_for("sac", seeds[0], overrides)
                updates = 50 if args.quick else 500
                section_prefetch(rows, preset, 2 if args.quick else args.repeats, updates)
            else:
                section_buffer(rows, args.quick)
    finally:
        ray.shutdown()
    text = tables(rows)
    print(text)
    if args.out:
        write_text_section(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
