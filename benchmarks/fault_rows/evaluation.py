"""Fault rows of issue 38: evaluation beside training (videos off the loop, a dead eval worker).

Each row runs real training (real Ray, CartPole) as a user would: the ``tdscheme`` command in a
child process with its own ``RAY_TMPDIR`` (the eval worker killed from outside), or the
preset's Trainer in this row's own process (the ``--video`` throughput, measured with and
without videos in the same process and on the same Ray, alternating). Heavy imports stay
inside the functions.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import row
from harness import fresh_ray_env, processes, processes_left, wait_until

from fault_rows._parts import TDSCHEME, outputs_on_exit, ray_lease

TIMEOUT_S = 600.0

#: ppo-cartpole small enough for 2 cores: one collector, an eval worker beside it
RUN = {
    "num_collectors": 1, "num_envs": 8, "frames_per_batch": 1024, "minibatch_size": 512,
    "num_epochs": 2, "collector_resources": {"num_cpus": 1}, "eval_num_envs": 2,
    "eval_episodes": 2, "eval_workers": 1, "target_return": None, "progress": False,
    "checkpoint_at_end": False,
}  # fmt: skip
#: the same settings as options of the ``tdscheme`` command
RUN_OPTIONS = [
    "--num-collectors", "1", "--num-envs", "8", "--frames-per-batch", "1024",
    "--minibatch-size", "512", "--num-epochs", "2", "--collector-resources", '{"num_cpus": 1}',
    "--eval-num-envs", "2", "--eval-episodes", "2", "--eval-workers", "1",
    "--target-return", "none", "--progress", "false", "--no-checkpoint-at-end",
]  # fmt: skip


def _training_fps(run_dir: Path) -> float:
    """Frames per second between the first and the last training step (set-up and the final
    evaluation left out), from the run's own ``time/elapsed_s``."""
    from tdscheme.engine import read_metrics

    elapsed = read_metrics(run_dir)["time/elapsed_s"]
    (first_frames, first_s), (last_frames, last_s) = elapsed[0], elapsed[-1]
    return (last_frames - first_frames) / (last_s - first_s)


def video_throughput() -> dict[str, Any]:
    """--video with an eval worker: training frames/s within 10 % of the same run without it."""
    from tdscheme.presets import get_preset

    fault = "--video with --eval-workers 1: training frames/s vs the same run without --video"
    start = time.perf_counter()
    fps: dict[bool, list[float]] = {False: [], True: []}
    videos = 0
    with ray_lease(), tempfile.TemporaryDirectory() as work:
        for i, video in enumerate([False, True] * 3):  # alternating: the machine's load drifts
            run_dir = Path(work) / f"run{i}"
            preset = get_preset("ppo-cartpole").override({
                **RUN, "total_frames": 32_768, "eval_every_frames": 8192, "video": video,
                "video_max_frames": 500, "run_dir": str(run_dir),
            })  # fmt: skip
            with preset.build_trainer() as trainer:
                summary = trainer.run()
            assert summary["frames"] == 32_768, summary
            fps[video].append(_training_fps(run_dir))
            if video:
                videos += len(list((run_dir / "videos").glob("*.mp4")))
    ratio = statistics.median(fps[True]) / statistics.median(fps[False])
    detail = (
        f"median training fps {statistics.median(fps[True]):.0f} with videos vs "
        f"{statistics.median(fps[False]):.0f} without: {ratio:.3f}x (per run: with "
        f"{[round(f) for f in fps[True]]}, without {[round(f) for f in fps[False]]}); "
        f"{videos} videos written in 3 runs"
    )
    ok = ratio >= 0.9 and videos >= 3
    return row(fault, "survived" if ok else "wrong result", time.perf_counter() - start,
               TIMEOUT_S, detail=detail)  # fmt: skip


def _eval_worker_pids(marker: str) -> list[int]:
    """The processes of the eval worker actors of the Ray whose temp directory is ``marker``."""
    found = processes()
    raylets = {p.pid for p in found if marker in p.cmdline and "raylet" in p.cmdline}
    return [p.pid for p in found if p.ppid in raylets and "EvalWorker" in p.cmdline]


def dead_eval_worker() -> dict[str, Any]:
    """`tdscheme train --eval-workers 1` with the eval actor SIGKILLed mid-run: rebuilt, the run
    ends at its budget with evaluations after the kill, no Ray process left."""
    fault = "tdscheme train --eval-workers 1, the eval worker's process SIGKILLed mid-run"
    work = Path(tempfile.mkdtemp(prefix="e", dir="/tmp"))
    ray_tmp = work / "ray"
    ray_tmp.mkdir()
    run_dir = work / "run"
    proc = subprocess.Popen(
        [*TDSCHEME, "train", "ppo-cartpole", *RUN_OPTIONS, "--total-frames", "24576",
         "--eval-every-frames", "2048", "--run-dir", str(run_dir)],
        env=fresh_ray_env(ray_tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=work,
    )  # fmt: skip
    metrics = run_dir / "metrics.csv"

    def evaluated() -> bool:
        return metrics.is_file() and ",eval/return," in metrics.read_text()

    wait_until(lambda: proc.poll() is not None or evaluated(), 240.0, poll_s=0.25)
    pids = _eval_worker_pids(str(ray_tmp))
    start = time.perf_counter()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    killed_at = len(metrics.read_text().splitlines()) if metrics.is_file() else 0
    outputs = outputs_on_exit(proc, 300.0)
    if outputs is None:
        return row(fault, "hang", time.perf_counter() - start, 240.0, detail="no exit in 300 s")
    output, _ = outputs
    seconds = time.perf_counter() - start
    lines = metrics.read_text().splitlines()
    after = [line for line in lines[killed_at:] if ",eval/return," in line]
    restarts = [float(line.rsplit(",", 1)[1]) for line in lines if ",eval/restarts," in line]
    summary = next((json.loads(x[9:]) for x in output.splitlines() if x.startswith("summary: ")),
                   {})  # fmt: skip
    left = processes_left(str(ray_tmp))
    ok = (proc.returncode == 0 and len(pids) == 1 and summary.get("frames") == 24576
          and after and restarts and max(restarts) >= 1 and not left)  # fmt: skip
    detail = (f"exit {proc.returncode}; killed pids {pids}; frames {summary.get('frames')}; "
              f"{len(after)} evaluations logged after the kill; eval/restarts "
              f"{max(restarts) if restarts else None}; Ray processes left: {len(left)}")  # fmt: skip
    return row(fault, "survived" if ok else "wrong result", seconds, 240.0, detail=detail)


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("eval: --video off the training loop", video_throughput),
    ("eval: eval worker SIGKILLed", dead_eval_worker),
]
