"""The lean rollout with frame stacking and running normalization vs torchrl's ``Collector``, in process.

One process, no Ray: ``LeanCollector`` (tdscheme's workers' collector) and torchrl's
``Collector`` step the same env with the same policy (the 2x64 tanh MLP of
``peers.mlp_policy``, deterministic), one after the other, in alternating pairs
(``--repeats``, default 3). Each measures frames/s over ``--batches`` batches of
``--frames`` frames after one warm-up batch. The envs (``--envs``):

* ``plain``: ``make_env("CartPole-v1", num_envs=64)`` in ``RewardSum`` and ``StepCounter``
  (the presets' envs): the reference row, the lean loop's arithmetic alone;
* ``stacked``: the same with ``CatFrames(N=4)`` on the observation, which the lean loop
  runs through the transform's own ``_step`` / ``_reset`` (a TensorDict per step);
* ``normalized``: the same with ``VecNormV2`` on the observation and the reward;
* ``both``: ``VecNormV2`` then ``CatFrames(N=4)``.

Both collectors give the same frames (``tests/rollout/test_lean_transforms.py``). The
table gives each env's ratio of medians (lean / torchrl) and the median of the per-pair
ratios. Run from the repository root::

    .venv/bin/python benchmarks/tools/lean_transforms.py            # ~2 minutes
    .venv/bin/python benchmarks/tools/lean_transforms.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import torch
from harness import frames_per_s, in_turn, json_line, paired_ratios
from peers import mlp_policy
from report import machine_info
from torchrl.envs import CatFrames, Compose, RewardSum, StepCounter, TransformedEnv, VecNormV2

from tdscheme.envs import make_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector

ENVS = ("plain", "stacked", "normalized", "both")
NUM_ENVS = 64


def make(kind: str) -> TransformedEnv:
    """CartPole x64 with the presets' bookkeeping and ``kind``'s transforms (see the module)."""
    extra = {
        "plain": [],
        "stacked": [CatFrames(N=4, dim=-1, in_keys=["observation"])],
        "normalized": [VecNormV2(in_keys=["observation", "reward"], decay=0.99)],
        "both": [
            VecNormV2(in_keys=["observation"], decay=0.99),
            CatFrames(N=4, dim=-1, in_keys=["observation"]),
        ],
    }[kind]
    env = make_env("CartPole-v1", num_envs=NUM_ENVS)
    return TransformedEnv(env, Compose(*extra, RewardSum(), StepCounter()))


def rate(cls: type, kind: str, frames: int, batches: int) -> float:
    """frames/s of ``cls`` on ``kind``'s env over ``batches`` batches after a warm-up one."""
    torch.manual_seed(0)
    env = make(kind)
    stacked = 4 if kind in ("stacked", "both") else 1
    collector = cls(
        env,
        mlp_policy(4 * stacked, 2),
        frames_per_batch=frames,
        auto_register_policy_transforms=False,
    )
    try:
        if cls is LeanCollector:
            assert collector.lean_reason is None, collector.lean_reason
        it = iter(collector)
        next(it)
        return frames_per_s(it, frames=frames * batches, min_batches=batches)
    finally:
        collector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 2 small batches")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.batches, args.repeats = 1024, 2, 1
    warnings.filterwarnings("ignore", message="Support of VecNormV2")
    torch.set_num_threads(1)
    json_line({"machine": machine_info()})
    rows = []
    for kind in args.envs.split(","):
        rates = in_turn(
            {cls: functools.partial(rate, cls, kind, args.frames, args.batches)
             for cls in (Collector, LeanCollector)},
            repeats=args.repeats, warmup=0,  # each rate has its warm-up batch
        )  # fmt: skip
        lean, torchrls = rates[LeanCollector], rates[Collector]
        ratios = paired_ratios(lean, torchrls)
        row = {
            "env": kind,
            "lean_fps": statistics.median(lean),
            "torchrl_fps": statistics.median(torchrls),
            "ratio_of_medians": ratios.ratio_of_medians,
            "median_of_ratios": ratios.median_of_ratios,
            "ratio_range": [ratios.low, ratios.high],
        }
        json_line(row)
        rows.append(row)
    print(f"\n| env (CartPole x{NUM_ENVS}) | lean frames/s | torchrl frames/s | lean / torchrl "
          "(ratio of medians) | median of ratios (range) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for r in rows:
        low, high = r["ratio_range"]
        print(f"| {r['env']} | {r['lean_fps']:,.0f} | {r['torchrl_fps']:,.0f} | "
              f"{r['ratio_of_medians']:.2f}x | {r['median_of_ratios']:.2f}x "
              f"({low:.2f}-{high:.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
