"""The GPU path end to end: presets trained with ``--device cuda`` beside the CPU learner.

For each preset (``--presets``; default ppo-cartpole, sac-pendulum, appo-pong) and each device
(``--devices``; all but ``cpu`` are skipped, with a line saying so, where torch sees no GPU;
``cuda-rank`` is ``--device cuda --num-learners 1``, the learner as one Ray rank that holds the
GPU, ``cuda-2ranks`` two gloo ranks that share it; off-policy presets then sample a Ray-held
buffer, ``--buffer-location ray``), one
``tdscheme train PRESET --device D`` run of the preset's ``FRAMES`` (times ``--frames-scale``)
in its own process (no evaluation, no checkpoint): that it exits 0 is the first check (the
workers get CPU weights and ask for no GPU; batches move to the learner's device). From its
``metrics.csv``:

* ``fps``: the run's frames per second, end to end;
* ``learn s / 1k frames``: the learner's seconds (``time/learn_s``, summed over the
  iterations) per 1,000 frames trained on. A preset's update is the same work on either
  device, so the CPU / CUDA ratio of this column is the ratio of updates per second.

Repeats alternate devices (``--repeats``, default 1: the device tool lends 15 minutes in
all). One JSON line per run; a markdown table (``--out``). Run from the repository root::

    .venv/bin/python benchmarks/gpu_path.py                           # cpu and cuda, 3 presets
    .venv/bin/python benchmarks/gpu_path.py --devices cpu --frames-scale 0.1   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from harness import json_line, tdscheme_executable
from report import machine_info, print_tables, run_process, write_markdown

from tdscheme.engine.run_log import read_metrics

#: frames per run, per preset: a few learner updates past start-up on the lent machine
FRAMES = {"ppo-cartpole": 65_536, "sac-pendulum": 8_192, "appo-pong": 40_960}
#: per learner-group device: (``--num-learners``, the Ray options of each rank)
RANKS = {
    "cuda-rank": (1, {"num_cpus": 1, "num_gpus": 1}),
    "cuda-2ranks": (2, {"num_cpus": 1, "num_gpus": 0.5}),  # two gloo ranks sharing the GPU
}
#: the presets that train off-policy: a learner group samples a Ray-held buffer
REPLAY_PRESETS = ("sac-pendulum",)
DEVICES = ("cpu", "cuda", *RANKS)


def one_run(
    preset: str, device: str, frames: int, work: Path, extra: list[str]
) -> dict[str, object]:
    """One ``tdscheme train`` run; its fps and learner seconds per 1,000 frames."""
    run_dir = work / f"{preset}-{device}-{time.monotonic_ns()}"
    group: list[str] = []
    if device in RANKS:
        num_learners, resources = RANKS[device]
        group = ["--num-learners", str(num_learners), "--learner-resources", json.dumps(resources)]
        if preset in REPLAY_PRESETS:
            group += ["--buffer-location", "ray"]
    command = [
        tdscheme_executable(), "train", preset, "--device", "cpu" if device == "cpu" else "cuda",
        *group, *extra,
        "--total-frames", str(frames), "--eval-every-frames", "0", "--no-eval-at-end",
        "--no-checkpoint-at-end", "--checkpoint-every-frames", "0", "--target-return", "none",
        "--run-dir", str(run_dir), "--progress", "false",
    ]  # fmt: skip
    try:
        _, _, exit_s = run_process(command, f"{preset} on {device}", timeout_s=900.0)
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # a row that says why, then the next
        return {"preset": preset, "device": device, "error": str(e)[-1500:]}
    metrics = read_metrics(run_dir)
    trained = max(f for f, _ in metrics["frames"])
    learn_s = sum(v for _, v in metrics["time/learn_s"])
    return {
        "preset": preset, "device": device, "frames": trained, "exit_s": round(exit_s, 1),
        "fps": round(metrics["fps"][-1][1], 1),
        "learn_s_per_1k_frames": round(1000.0 * learn_s / trained, 4),
        "iterations": len(metrics["time/learn_s"]),
    }  # fmt: skip


def table(rows: list[dict[str, object]]) -> list[list[str]]:
    """Rows per preset and device, with the CUDA run's learner speed-up over the CPU one."""
    out = [["preset", "device", "frames", "fps", "learn s / 1k frames", "learner x CPU"]]
    cpu = {r["preset"]: r["learn_s_per_1k_frames"] for r in rows if r["device"] == "cpu"}
    for r in rows:
        if "error" in r:
            out.append([str(r["preset"]), str(r["device"]), "failed", "–", "–", "–"])
            continue
        base = cpu.get(r["preset"])
        ratio = f"{base / r['learn_s_per_1k_frames']:.2f}x" if base else "–"
        out.append([str(r["preset"]), str(r["device"]), f"{r['frames']:,}", f"{r['fps']:,.1f}",
                    f"{r['learn_s_per_1k_frames']:.4f}", ratio])  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(FRAMES))
    p.add_argument("--devices", default=",".join(DEVICES))
    p.add_argument("--frames-scale", type=float, default=1.0, help="x each preset's frames")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=None, help="write the table as markdown here")
    p.add_argument(
        "--train-args",
        default="",
        help="more `tdscheme train` arguments, e.g. "
        "'--env-backend gymnasium' where EnvPool is missing",
    )
    args = p.parse_args(argv)
    presets = [x for x in args.presets.split(",") if x]
    devices = [d for d in args.devices.split(",") if d]
    if unknown := sorted(set(presets) - set(FRAMES)) + sorted(set(devices) - set(DEVICES)):
        p.error(f"unknown presets or devices {unknown}; accepted: {sorted(FRAMES)}, {DEVICES}")
    if not torch.cuda.is_available() and set(DEVICES[1:]) & set(devices):
        print("gpu_path: torch sees no CUDA device here: the cuda runs are skipped", flush=True)
        devices = [d for d in devices if d == "cpu"]
    extra = shlex.split(args.train_args)
    started, rows, machine = time.monotonic(), [], machine_info()
    json_line({"machine": machine, "cuda": torch.cuda.is_available()})
    with tempfile.TemporaryDirectory(prefix="tdscheme-gpu-path-") as tmp:
        for _ in range(args.repeats):
            for preset in presets:
                frames = max(1, round(FRAMES[preset] * args.frames_scale))
                for device in devices:
                    rows.append(one_run(preset, device, frames, Path(tmp), extra))
                    json_line(rows[-1])
    tables = {"the GPU path: learner time per frame, CPU vs CUDA": table(rows)}
    print_tables(tables)
    if args.out:
        write_markdown(
            args.out, title="The GPU path", script="gpu_path.py", argv=sys.argv[1:],
            seconds=time.monotonic() - started, machine=machine, tables=tables,
            intro="Each preset trained with `--device cpu`, `--device cuda` and, for the presets "
            "learner-group rows `--num-learners 1` and 2 on the GPU (see the script).",
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
