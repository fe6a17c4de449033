"""Evaluation beside training: ppo-cartpole to 475 with an eval worker against inline evaluation.

For each seed, the ``ppo-cartpole`` preset runs twice through the Trainer in this
process, with the same hyperparameters and evaluation schedule: ``inline`` (the
driver plays the evaluation episodes while training waits, ``eval_workers=0``) and
``eval-worker`` (``eval_workers=1``: an actor evaluates the newest weights while
training goes on; results are logged at the frames of the weights they used). Each
row: frames and seconds of training to the evaluation that reached 475 (for the
worker: the weights' frames, and the run's time when those weights were sent),
training frames per second over the whole run (frames trained / loop seconds), the
evaluations run and skipped. Run from the repository root::

    .venv/bin/python benchmarks/eval_workers.py --seeds 0,1,2 --out section.md

Output: one JSON line per run (with the machine), then a table with medians and the
worker's ratios to inline (ratio of medians and median of per-seed ratios).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from typing import Any

from harness import json_line, paired_ratios
from report import machine_info, print_tables, write_markdown

from tdscheme.engine.run_log import read_metrics
from tdscheme.presets import get_preset

RUNS = {"inline": {"eval_workers": 0}, "eval-worker": {"eval_workers": 1}}


def run(name: str, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir:
        preset = get_preset("ppo-cartpole").override({
            **RUNS[name], "seed": seed, "run_dir": run_dir, "progress": False,
            "checkpoint_at_end": False, "eval_at_end": False,
        })  # fmt: skip
        with preset.build_trainer() as trainer:
            summary = trainer.run()
        metrics = read_metrics(run_dir)
    evals = metrics.get("eval/return", [])
    skipped = metrics.get("eval/skipped", [(0, 0.0)])[-1][1]
    return {
        "run": name, "seed": seed, "reached": summary["target_reached"],
        "target_frames": summary["target_frames"], "target_s": summary["target_elapsed_s"],
        "frames": summary["frames"], "loop_s": summary["elapsed_s"],
        "train_fps": summary["frames"] / summary["elapsed_s"],
        "evaluations": len(evals), "skipped": int(skipped),
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> list[list[str]]:
    inline = {r["seed"]: r for r in rows if r["run"] == "inline"}
    out = [["run", "reached", "median frames to 475", "median s to 475", "median train fps",
            "fps / inline (ratio of medians)", "fps / inline (median of ratios)",
            "evaluations (skipped)"]]  # fmt: skip
    for name in RUNS:
        runs = [r for r in rows if r["run"] == name]
        fps = statistics.median(r["train_fps"] for r in runs)
        base = statistics.median(r["train_fps"] for r in inline.values())
        ratios = paired_ratios(
            [r["train_fps"] for r in runs], [inline[r["seed"]]["train_fps"] for r in runs]
        )
        out.append([
            name, f"{sum(r['reached'] for r in runs)}/{len(runs)}",
            f"{statistics.median(r['target_frames'] or r['frames'] for r in runs):.0f}",
            f"{statistics.median(r['target_s'] or r['loop_s'] for r in runs):.1f}",
            f"{fps:.0f}", f"{fps / base:.2f}", f"{ratios.median_of_ratios:.2f}",
            f"{sum(r['evaluations'] for r in runs)} ({sum(r['skipped'] for r in runs)})",
        ])  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="seeds, comma-separated")
    parser.add_argument("--out", help="write the table as a markdown section to this path")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in RUNS:
            rows.append(run(name, seed))
            json_line({**rows[-1], **machine_info()})
    tables = {"ppo-cartpole to 475: inline evaluation vs an eval worker": table(rows)}
    print_tables(tables)
    if args.out:
        write_markdown(
            args.out, title="Evaluation beside training", script="eval_workers.py",
            argv=sys.argv[1:], seconds=time.monotonic() - started, machine=machine_info(),
            intro=__doc__.split("\n\n")[1], tables=tables,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
