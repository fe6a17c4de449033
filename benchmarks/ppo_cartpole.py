"""PPO on CartPole-v1 to an evaluation return of 475: tdscheme against a plain torchrl loop.

Three runs per seed, one after the other, with the same hyperparameters (the
``ppo-cartpole`` preset, with any ``--set`` overrides):

* ``cli``: the command a user types, ``tdscheme train ppo-cartpole --seed S``, in
  a new process; its wall time is the command's own "since the command started"
  (process start to the evaluation that reached the target), and ``exit_s`` the
  whole process including writing the last checkpoint and shutting Ray down;
* ``torchrl-script``: the ``torchrl`` loop below as a script of its own, in a new
  process (``--runs torchrl`` of this file): its wall time counts from the
  process start, imports included, like ``cli``'s;
* ``tdscheme``: in this process, the preset through :class:`tdscheme.engine.Trainer` (a local Ray,
  ``num_collectors`` collector actors, the learner in this process), stopping
  at the first evaluation whose mean return reaches the target;
* ``torchrl``: a plain single-process loop written from torchrl's parts only:
  ``torchrl.collectors.Collector`` over the same batched env (one process
  steps ``num_envs`` envs), ``ClipPPOLoss``, ``GAE``, Adam with the same linear
  learning-rate decay, the same epochs and minibatches and torch threads,
  evaluated on the same schedule with the same evaluation.

Wall time counts from the start of each run (building envs, networks, Ray
and its workers included; for ``cli`` the imports too) to the evaluation that
reached the target; frames are the frames trained on by then. The frames to 475
vary with the seed, so compare medians over several seeds. Run from the
repository root::

    .venv/bin/python benchmarks/ppo_cartpole.py                    # all runs, seed 0
    .venv/bin/python benchmarks/ppo_cartpole.py --seeds 0,1,2,3,4 --out section.md
    .venv/bin/python benchmarks/ppo_cartpole.py --quick            # smoke test
    .venv/bin/python benchmarks/ppo_cartpole.py --set lr=0.001 --runs tdscheme,torchrl

Output: one JSON line per run and seed on stdout (with machine and versions),
then a table of every run and the medians, with tdscheme's speedup over the
plain loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from harness import json_line, tdscheme_executable
from report import machine_info, run_process, train_result, write_text_section
from torchrl.collectors import Collector
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from tdscheme.cli.options import option_name
from tdscheme.engine import evaluate
from tdscheme.presets import Preset, get_preset

QUICK = {"total_frames": 8192, "frames_per_batch": 2048, "target_return": 10_000.0,
         "eval_every_frames": 4096}  # fmt: skip


def cli_options(overrides: dict[str, Any]) -> list[str]:
    """``{"lr": 0.001, "sync": False, "hidden_sizes": [32, 32]}`` -> ``tdscheme train`` options.

    A bool becomes ``--x`` / ``--no-x`` (the form of plain bool settings).
    """
    args = []
    for key, value in overrides.items():
        option = option_name(key)
        if isinstance(value, bool):
            args.append(option if value else "--no-" + option[2:])
        elif isinstance(value, (list, tuple)):
            args += [option, ",".join(map(str, value))]
        elif isinstance(value, dict):
            args += [option, json.dumps(value)]
        else:
            args += [option, "none" if value is None else str(value)]
    return args


def run_cli(preset: Preset, overrides: dict[str, Any]) -> dict[str, Any]:
    """``tdscheme train`` in a new process; the wall time is the one the command prints."""
    with tempfile.TemporaryDirectory() as run_dir:
        options = {**overrides, "seed": preset.scheme.seed, "run_dir": run_dir}
        command = [tdscheme_executable(), "train", preset.name, *cli_options(options)]
        stdout, _, exit_s = run_process([*command, "--progress", "false"], "tdscheme train")
    return train_result(stdout, exit_s)


def run_torchrl_script(preset: Preset, overrides: dict[str, Any]) -> dict[str, Any]:
    """The plain torchrl loop in a new process; wall time from the process start."""
    sets = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    stdout, start, exit_s = run_process(
        [sys.executable, __file__, "--runs", "torchrl", "--seeds", str(preset.scheme.seed),
         *(["--set", *sets] if sets else [])],
        "the torchrl script",
    )  # fmt: skip
    row = json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))
    return {
        "frames": row["frames"],
        "wall_s": row["done_unix"] - start,
        "exit_s": exit_s,
        "reached": row["reached"],
        "eval_return": row["eval_return"],
    }


def run_tdscheme(preset: Preset, overrides: dict[str, Any]) -> dict[str, Any]:
    """The preset through the Trainer, to the target; returns frames and seconds."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        preset = preset.override(
            {"run_dir": run_dir, "progress": False, "checkpoint_at_end": False}
        )
        with preset.build_trainer() as trainer:
            summary = trainer.run()
    return {
        "frames": summary["target_frames"] or summary["frames"],
        "wall_s": summary["target_elapsed_s"] or (time.perf_counter() - start),
        "reached": summary["target_reached"],
        "eval_return": summary["eval_return"],
    }


def run_torchrl(preset: Preset, overrides: dict[str, Any]) -> dict[str, Any]:
    """A plain single-process torchrl PPO loop with the preset's hyperparameters."""
    start = time.perf_counter()
    a, s, t = preset.algo, preset.scheme, preset.trainer
    threads = torch.get_num_threads()
    if t.num_threads is not None:  # as the Trainer does
        torch.set_num_threads(t.num_threads)
    torch.manual_seed(s.seed or 0)
    modules = preset.policy_factory()()
    actor, critic = modules["actor"], modules["critic"]
    loss = ClipPPOLoss(
        actor, critic, clip_epsilon=a.clip_epsilon, entropy_bonus=a.entropy_coef > 0,
        entropy_coeff=a.entropy_coef, critic_coeff=a.critic_coef,
        loss_critic_type=a.loss_critic_type, normalize_advantage=a.normalize_advantage,
    )  # fmt: skip
    gae = GAE(gamma=a.gamma, lmbda=a.gae_lambda, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=a.lr)
    total_updates = max(1, (a.anneal_frames or t.total_frames) // s.frames_per_batch)
    sched = torch.optim.lr_scheduler.LinearLR(
        optim, 1.0, a.lr_end_factor if a.anneal_lr else 1.0, total_iters=total_updates
    )
    collector = Collector(
        preset.env_factory(), actor, frames_per_batch=s.frames_per_batch,
        total_frames=t.total_frames,
    )  # fmt: skip
    collector.set_seed(s.seed or 0)
    eval_env = preset.eval_env_factory()()
    frames, last_eval, result = 0, 0, None
    try:
        for batch in collector:
            with torch.no_grad():
                batch = gae(batch)
            flat = batch.reshape(-1)
            size = a.minibatch_size or flat.numel()
            for _ in range(a.num_epochs):
                for idx in torch.randperm(flat.numel()).split(size):
                    out = loss(flat[idx])
                    total = sum(v for k, v in out.items() if k.startswith("loss_"))
                    optim.zero_grad()
                    total.backward()
                    if a.max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(loss.parameters(), a.max_grad_norm)
                    optim.step()
            sched.step()
            collector.update_policy_weights_()
            frames += flat.numel()
            if t.eval_every_frames and frames - last_eval >= t.eval_every_frames:
                last_eval = frames
                result = evaluate(eval_env, actor, episodes=t.eval_episodes)
                if t.target_return is not None and result.mean_return >= t.target_return:
                    break
    finally:
        collector.shutdown()
        eval_env.close()
        torch.set_num_threads(threads)
    reached = (
        result is not None and t.target_return is not None and result.mean_return >= t.target_return
    )
    return {
        "frames": frames,
        "wall_s": time.perf_counter() - start,
        "done_unix": time.time(),
        "reached": bool(reached),
        "eval_return": None if result is None else result.mean_return,
    }


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["lr=0.001", "num_epochs=4"]`` -> ``{"lr": 0.001, "num_epochs": 4}`` (JSON values)."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of every run, the medians per run, and the speedups over the plain loop."""
    lines = ["| run | seed | reached | frames | wall s | frames/s |", "|---|---|---|---|---|---|"]
    for r in rows:
        fps = r["frames"] / r["wall_s"] if r["wall_s"] else 0.0
        lines.append(
            f"| {r['run']} | {r['seed']} | {r['reached']} | {r['frames']:,} | {r['wall_s']:.1f} "
            f"| {fps:,.0f} |"
        )
    medians: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == name]
        walls = [r["wall_s"] for r in mine]
        medians[name] = {"wall_s": statistics.median(walls), "max_s": max(walls),
                         "frames": statistics.median(r["frames"] for r in mine),
                         "reached": sum(r["reached"] for r in mine), "runs": len(mine)}  # fmt: skip
    lines += [
        "",
        "| run | reached | median frames | median wall s | max wall s |",
        "|---|---|---|---|---|",
    ]
    for name, m in medians.items():
        lines.append(
            f"| {name} | {m['reached']}/{m['runs']} | {m['frames']:,.0f} | {m['wall_s']:.1f} "
            f"| {m['max_s']:.1f} |"
        )
    for ours, plain in (("cli", "torchrl-script"), ("tdscheme", "torchrl")):
        if ours in medians and plain in medians:
            a, b = medians[ours], medians[plain]
            lines.append(
                f"\n{ours} vs {plain} (medians): {b['wall_s'] / a['wall_s']:.2f}x in wall time, "
                f"{b['frames'] / max(a['frames'], 1):.2f}x in frames"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few thousand frames, no target")
    parser.add_argument(
        "--runs", default="cli,torchrl-script,tdscheme,torchrl", help="runs, comma-separated"
    )
    parser.add_argument(
        "--seeds", default="0", help="comma-separated seeds, each run once per seed"
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="preset overrides, e.g. lr=0.001 num_collectors=2")  # fmt: skip
    parser.add_argument("--out", help="write the results as a markdown section to this file")
    args = parser.parse_args(argv)
    overrides = parse_overrides(args.set)
    if args.quick:
        overrides = {**QUICK, **overrides}
    runners = {"cli": run_cli, "torchrl-script": run_torchrl_script, "tdscheme": run_tdscheme,
               "torchrl": run_torchrl}  # fmt: skip
    names = args.runs.split(",")
    for name in names:
        if name not in runners:
            parser.error(f"argument --runs: unknown run {name!r}; accepted: {sorted(runners)}")
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"argument --seeds: {args.seeds!r} is invalid; accepted: ints, e.g. 0,1,2")
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        preset = get_preset("ppo-cartpole").override({**overrides, "seed": seed})
        for name in names:
            row = {"run": name, "seed": seed, **runners[name](preset, overrides)}
            rows.append(row)
            json_line({**row, "overrides": overrides, "machine": machine_info()})
    text = table(rows)
    print(text)
    if args.out:
        write_text_section(args.out, text, title="PPO CartPole-v1 to 475")
    return 0


if __name__ == "__main__":
    sys.exit(main())
