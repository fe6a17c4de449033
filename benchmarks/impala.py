"""IMPALA / APPO: CartPole to 475 beside PPO, Pong throughput beside torchrl's IMPALA, a Pong soak.

Three sections (``--sections``), run from the repository root::

    .venv/bin/python benchmarks/impala.py --sections cartpole --seeds 0,1,2
    .venv/bin/python benchmarks/impala.py --sections pong --frames 20000 --torchrl-src PATH
    .venv/bin/python benchmarks/impala.py --sections soak --minutes 30 --run-dir runs/pong

* ``cartpole``: ``impala-cartpole``, ``appo-cartpole`` and ``ppo-cartpole`` to an
  evaluation return of 475, each seed in turn, through the Trainer in this process:
  frames and seconds of training to the evaluation that reached it.
* ``pong``: ``--frames`` agent steps (4 emulator frames each) of IMPALA on Pong, no
  evaluation, side by side: torchrl's own ``sota-implementations/impala`` script
  (read from the pytorch/rl checkout ``--torchrl-src`` and patched at run time by
  ``benchmarks/torchrl_clients``, on torchrl's RayCollector) shrunk to 2 CPU workers, and tdscheme's ``impala-pong`` with the same frames per batch (320 agent
  steps), the same loss and one learner update per batch, twice: as the preset is
  (EnvPool, the shallow CNN) and with torchrl's env engine and network (ale-py through
  gymnasium, the "nature" CNN). Each row: frames collected per second of the training
  loop, learner updates per second, frames trained on, and the policy lag the learner
  saw (torchrl records no policy version: it cannot say).
* ``soak``: ``impala-pong`` (or ``--preset``) for ``--minutes``, evaluated every
  ``--eval-every-frames``, sampling every 30 s the driver's RSS and the pages allocated
  in this Ray's object store (its /dev/shm file); the learning curve is
  ``tdscheme plot --metric eval/return RUN_DIR``.

Output: one JSON line per run (with the machine), then tables; ``--out`` writes them as
a markdown section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import json_line
from report import machine_info, print_tables, write_markdown

from tdscheme.engine.run_log import read_metrics
from tdscheme.presets import get_preset
from tdscheme.runtime import interrupts

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS / "torchrl_clients"))  # the runner of torchrl's scripts
CARTPOLE = ("impala-cartpole", "appo-cartpole", "ppo-cartpole")
#: Agent steps per batch in the pong section (IMPALA's 20-step unroll x 16 envs).
PONG_BATCH = 320
QUIET = {"progress": False, "checkpoint_at_end": False}


def train(name: str, overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """Runs a preset through the Trainer in this process; returns its summary and metrics."""
    with tempfile.TemporaryDirectory() as run_dir:
        preset = get_preset(name).override({**QUIET, **overrides, "run_dir": run_dir})
        with preset.build_trainer() as trainer:
            summary = trainer.run()
        return summary, read_metrics(run_dir)


# -- cartpole ------------------------------------------------------------------------------


def cartpole(seeds: list[int]) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        for name in CARTPOLE:
            summary, _ = train(name, {"seed": seed})
            row = {
                "section": "cartpole", "preset": name, "seed": seed,
                "reached": summary["target_reached"],
                "frames": summary["target_frames"] or summary["frames"],
                "seconds": summary["target_elapsed_s"] or summary["elapsed_s"],
                "eval_return": summary["eval_return"],
            }  # fmt: skip
            rows.append(row)
            json_line({**row, **machine_info()})
    return rows


def cartpole_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Medians per preset, and each one's time against ppo-cartpole's (two statistics)."""
    by = {name: [r for r in rows if r["preset"] == name] for name in CARTPOLE}
    ppo = {r["seed"]: r["seconds"] for r in by["ppo-cartpole"]}
    table = [["preset", "reached 475", "median frames", "median s", "s / ppo (ratio of medians)",
              "s / ppo (median of per-seed ratios)"]]  # fmt: skip
    for name, runs in by.items():
        med = statistics.median(r["seconds"] for r in runs)
        ratios = [r["seconds"] / ppo[r["seed"]] for r in runs if r["seed"] in ppo]
        table.append([
            name, f"{sum(r['reached'] for r in runs)}/{len(runs)}",
            f"{statistics.median(r['frames'] for r in runs):.0f}", f"{med:.1f}",
            f"{med / statistics.median(ppo.values()):.2f}",
            f"{statistics.median(ratios):.2f}" if ratios else "-",
        ])  # fmt: skip
    return table


# -- pong ----------------------------------------------------------------------------------


def pong_tdscheme(label: str, frames: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """impala-pong for ``frames`` agent steps, no evaluation: throughput and lag."""
    summary, metrics = train("impala-pong", {
        "total_frames": frames, "frames_per_batch": PONG_BATCH, "eval_every_frames": 0,
        "eval_at_end": False, "checkpoint_every_frames": 0, "target_return": None,
        **overrides,
    })  # fmt: skip
    seconds = summary["elapsed_s"]
    collected = metrics["collector/ledger/collected"][-1][1]
    return {
        "section": "pong", "run": label, "frames_collected": collected,
        "frames_trained": summary["frames"], "updates": summary["iterations"],
        "seconds": seconds, "collect_fps": collected / seconds,
        "updates_per_s": summary["iterations"] / seconds,
        "lag_mean": statistics.fmean(v for _, v in metrics["policy_lag/mean"]),
        "lag_max": max(v for _, v in metrics["policy_lag/max"]),
    }  # fmt: skip


def pong_torchrl(frames: int, timeout_s: float, torchrl_src: str | None) -> dict[str, Any]:
    """torchrl's IMPALA script, 2 workers, one update per batch of PONG_BATCH agent steps.

    The script is read from the pytorch/rl checkout ``torchrl_src`` and patched there as
    ``benchmarks/torchrl_clients/run.py`` patches it (nothing of it is kept here).
    """
    from client_scripts import client_scripts
    from run import prepare, script_env
    from torchrl_source import SourceUnavailable, from_checkout

    if torchrl_src is None:
        raise SourceUnavailable("pong's torchrl run needs --torchrl-src (a pytorch/rl checkout)")
    client = next(c for c in client_scripts() if c.name == "impala_multi_node_ray")
    overrides = [
        "collector.num_workers=2", f"collector.frames_per_batch={PONG_BATCH * 4}",
        f"collector.total_frames={frames * 4}", "loss.batch_size=1", "logger.backend=null",
        f"logger.test_interval={frames * 400}", "ray_init_config.num_cpus=2",
        "remote_worker_resources.num_gpus=0", "remote_worker_resources.memory=1073741824",
        "local_device=cpu",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as workdir, tempfile.TemporaryDirectory() as out_dir:
        script = prepare(client, from_checkout(torchrl_src), "torchrl", Path(workdir))
        proc = subprocess.run(
            [sys.executable, str(script), *overrides, f"hydra.run.dir={out_dir}"],
            cwd=workdir, env=script_env(Path(workdir)), capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("impala-report: ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"torchrl's IMPALA failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads(lines[-1].removeprefix("impala-report: "))
    seconds = report["seconds"]
    return {
        "section": "pong", "run": "torchrl impala_multi_node_ray.py (gymnasium, nature CNN)",
        "frames_collected": report["frames"],
        # its loop keeps batch_size batches, then updates on them and skips the batch in hand
        "frames_trained": report["updates"] * PONG_BATCH, "updates": report["updates"],
        "seconds": seconds, "collect_fps": report["frames"] / seconds,
        "updates_per_s": report["updates"] / seconds, "lag_mean": None, "lag_max": None,
    }  # fmt: skip


def pong(
    frames: int, runs: list[str], timeout_s: float, torchrl_src: str | None = None
) -> list[dict[str, Any]]:
    choices = {
        "torchrl": lambda: pong_torchrl(frames, timeout_s, torchrl_src),
        "tdscheme-same": lambda: pong_tdscheme(
            "tdscheme impala-pong (gymnasium, nature CNN)", frames,
            {"env_backend": "gymnasium", "pixel_network": "nature"},
        ),
        "tdscheme": lambda: pong_tdscheme("tdscheme impala-pong (EnvPool, shallow CNN)", frames, {}),
    }  # fmt: skip
    rows = []
    for name in runs:
        row = choices[name]()
        rows.append(row)
        json_line({**row, **machine_info()})
    return rows


def pong_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    peer = next((r for r in rows if r["run"].startswith("torchrl")), None)
    table = [["run", "frames collected", "frames trained", "updates", "loop s", "collect fps",
              "x torchrl", "updates/s", "x torchrl", "lag mean / max"]]  # fmt: skip
    for r in rows:
        fps_x = f"{r['collect_fps'] / peer['collect_fps']:.2f}" if peer else "-"
        ups_x = f"{r['updates_per_s'] / peer['updates_per_s']:.2f}" if peer else "-"
        lag = (
            "not recorded" if r["lag_mean"] is None else f"{r['lag_mean']:.2f} / {r['lag_max']:.0f}"
        )
        table.append([
            r["run"], f"{r['frames_collected']:.0f}", f"{r['frames_trained']:.0f}",
            str(r["updates"]), f"{r['seconds']:.1f}", f"{r['collect_fps']:.0f}", fps_x,
            f"{r['updates_per_s']:.2f}", ups_x, lag,
        ])  # fmt: skip
    return table


# -- soak ----------------------------------------------------------------------------------


def rss_mb() -> float:
    """This process's resident memory (the driver: learner, queue, decoded batches)."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def plasma_allocated_mb() -> float:
    """Pages allocated in this Ray's object store (its /dev/shm file, held open by the raylet).

    Per cluster (another Ray on the machine is not counted); a high-water mark: pages
    the store touched once stay allocated.
    """
    import ray

    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    for fd in os.listdir(f"/proc/{raylet}/fd"):
        path = f"/proc/{raylet}/fd/{fd}"
        with contextlib.suppress(OSError):
            if "plasma" in os.readlink(path):
                return os.stat(path).st_blocks * 512 / 2**20
    return float("nan")


def soak(preset: str, minutes: float, eval_every: int, run_dir: str) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not stop.wait(30.0):
            samples.append({"section": "soak", "t_s": round(time.monotonic() - start),
                            "driver_rss_mb": round(rss_mb()),
                            "plasma_allocated_mb": round(plasma_allocated_mb())})  # fmt: skip
            json_line(samples[-1])

    overrides = {**QUIET, "run_dir": run_dir, "total_frames": 100_000_000,
                 "eval_every_frames": eval_every, "target_return": None,
                 "checkpoint_every_frames": eval_every}  # fmt: skip
    thread = threading.Thread(target=sample, daemon=True)
    preset_obj = get_preset(preset).override(overrides)
    with preset_obj.build_trainer() as trainer:
        thread.start()
        # the run stops between two steps as on SIGTERM (checkpoint, summary, no final eval)
        timer = threading.Timer(minutes * 60, interrupts.request, args=(signal.SIGTERM,))
        timer.start()
        try:
            summary = trainer.run()
        finally:
            timer.cancel()
            stop.set()
    json_line({"section": "soak", "summary": summary, **machine_info()})
    evals = read_metrics(run_dir).get("eval/return", [])
    return [*samples, *({"section": "soak-eval", "frames": f, "eval_return": v} for f, v in evals)]


def soak_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    mem = [r for r in rows if r["section"] == "soak"]
    evals = [r for r in rows if r["section"] == "soak-eval"]
    table = [["t s", "driver RSS MB", "object store pages MB"]]
    table += [[str(r["t_s"]), str(r["driver_rss_mb"]), str(r["plasma_allocated_mb"])] for r in mem]
    table += [["frames", "eval return", ""]]
    table += [[str(r["frames"]), f"{r['eval_return']:.1f}", ""] for r in evals]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="cartpole,pong", help="cartpole, pong and/or soak")
    parser.add_argument("--seeds", default="0,1,2", help="cartpole: seeds, comma-separated")
    parser.add_argument("--frames", type=int, default=20_000, help="pong: agent steps per run")
    parser.add_argument("--runs", default="torchrl,tdscheme-same,tdscheme", help="pong: runs")
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="pong: torchrl's limit")
    parser.add_argument("--torchrl-src", default=os.environ.get("TORCHRL_SRC"),
                        help="pong: a pytorch/rl checkout holding torchrl's IMPALA script")  # fmt: skip
    parser.add_argument("--preset", default="impala-pong", help="soak: the preset")
    parser.add_argument("--minutes", type=float, default=30.0, help="soak: minutes")
    parser.add_argument("--eval-every-frames", type=int, default=100_000, help="soak")
    parser.add_argument("--run-dir", default=None, help="soak: the run directory (kept)")
    parser.add_argument("--out", help="write the tables as a markdown section to this path")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    started = time.monotonic()
    tables: dict[str, list[list[str]]] = {}
    if "cartpole" in sections:
        seeds = [int(s) for s in args.seeds.split(",")]
        tables["CartPole-v1 to 475"] = cartpole_table(cartpole(seeds))
    if "pong" in sections:
        rows = pong(args.frames, args.runs.split(","), args.timeout_s, args.torchrl_src)
        tables[f"Pong, {args.frames} agent steps, 2 workers"] = pong_table(rows)
    if "soak" in sections:
        run_dir = args.run_dir or tempfile.mkdtemp(prefix="impala-soak-")
        rows = soak(args.preset, args.minutes, args.eval_every_frames, run_dir)
        tables[f"{args.preset} for {args.minutes:g} min ({run_dir})"] = soak_table(rows)
    print_tables(tables)
    if args.out:
        write_markdown(
            args.out, title="IMPALA / APPO", script="impala.py", argv=sys.argv[1:],
            seconds=time.monotonic() - started, machine=machine_info(),
            intro=__doc__.split("\n\n")[3], tables=tables,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
