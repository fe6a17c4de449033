"""PPO on CartPole-v1 to an evaluation return of 475: tdscheme against a plain torchrl loop.

Both runs happen in this one process, one after the other, with the same
hyperparameters (the ``ppo-cartpole`` preset, with any ``--set`` overrides):

* ``tdscheme``: the preset through :class:`tdscheme.engine.Trainer` (a local Ray,
  ``num_collectors`` collector actors, the learner in this process), stopping
  at the first evaluation whose mean return reaches the target;
* ``torchrl``: a plain single-process loop written from torchrl's parts only:
  ``torchrl.collectors.Collector`` over the same batched env (one process
  steps ``num_envs`` envs), ``ClipPPOLoss``, ``GAE``, Adam with the same linear
  learning-rate decay, the same epochs and minibatches and torch threads,
  evaluated on the same schedule with the same evaluation.

Wall time counts from the start of each run (building envs, networks, Ray
and its workers included) to the evaluation that reached the target; frames
are the frames trained on by then. Run from the repository root::

    .venv/bin/python benchmarks/ppo_cartpole.py                    # both runs
    .venv/bin/python benchmarks/ppo_cartpole.py --quick            # smoke test
    .venv/bin/python benchmarks/ppo_cartpole.py --set lr=0.001 --out section.md

Output: one JSON line per run on stdout (with machine and versions), then a
table with tdscheme's speedup over the plain loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from typing import Any

import torch
from report import machine_info
from torchrl.collectors import Collector
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from tdscheme.engine import evaluate
from tdscheme.presets import Preset, get_preset

QUICK = {"total_frames": 8192, "frames_per_batch": 2048, "target_return": 10_000.0,
         "eval_every_frames": 4096}  # fmt: skip


def run_tdscheme(preset: Preset) -> dict[str, Any]:
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


def run_torchrl(preset: Preset) -> dict[str, Any]:
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


def table(rows: dict[str, dict[str, Any]]) -> str:
    """A markdown table of both runs and tdscheme's speedup over the plain loop."""
    ours, plain = rows.get("tdscheme"), rows.get("torchrl")
    lines = ["| run | reached | frames | wall s | frames/s |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        fps = r["frames"] / r["wall_s"] if r["wall_s"] else 0.0
        lines.append(f"| {name} | {r['reached']} | {r['frames']} | {r['wall_s']:.1f} | {fps:.0f} |")
    if ours and plain:
        lines.append(
            f"\ntdscheme vs plain torchrl: {plain['wall_s'] / ours['wall_s']:.2f}x faster in wall "
            f"time, {plain['frames'] / max(ours['frames'], 1):.2f}x fewer frames"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few thousand frames, no target")
    parser.add_argument("--runs", default="tdscheme,torchrl", help="which runs, comma-separated")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="preset overrides, e.g. lr=0.001 num_collectors=2")  # fmt: skip
    parser.add_argument("--out", help="write the results as a markdown section to this file")
    args = parser.parse_args(argv)
    overrides = parse_overrides(args.set)
    if args.quick:
        overrides = {**QUICK, **overrides}
    preset = get_preset("ppo-cartpole").override(overrides)
    rows: dict[str, dict[str, Any]] = {}
    runners = {"tdscheme": run_tdscheme, "torchrl": run_torchrl}
    for name in args.runs.split(","):
        if name not in runners:
            parser.error(f"argument --runs: unknown run {name!r}; accepted: {sorted(runners)}")
        rows[name] = runners[name](preset)
        record = {"run": name, **rows[name], "overrides": overrides, "machine": machine_info()}
        print(json.dumps(record), flush=True)
    text = table(rows)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("## PPO CartPole-v1 to 475\n\n")
            f.write(f"Command: `{' '.join([sys.executable, *sys.argv])}`\n\n")
            f.write(f"Machine: `{json.dumps(machine_info())}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
