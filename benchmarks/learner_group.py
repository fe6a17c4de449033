"""Learner groups on a learner-bound workload: 2 ranks against 1, the same batch, the same steps.

A real batch of the preset's frames is collected once (appo-pong: 1,024 frames of EnvPool
Pong, uint8 4x84x84; see ``pixel_learner.real_batch``). Then, in alternating repeats, a
:class:`~tdscheme.learner.LearnerGroup` of 1 rank and one of 2 ranks (each rank a Ray actor
with ``{"num_cpus": 1}``, so one torch thread) are built from the same initial weights and
each takes ``--updates`` updates on that batch; both take exactly the same optimizer steps
(2 ranks split each minibatch and all-reduce the gradient). The figure is the updates'
samples per second (frames x updates / seconds, the wall time of ``group.update`` on the
driver, shards sent included), and the ratio 2 ranks / 1 rank, paired by repeat.

Run from the repository root::

    .venv/bin/python benchmarks/learner_group.py                       # appo-pong, 3 repeats
    .venv/bin/python benchmarks/learner_group.py --presets ppo-cartpole --frames-scale 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray
import torch
from harness import json_line, paired_ratios
from pixel_learner import real_batch
from report import machine_info

from tdscheme.learner import LearnerGroup
from tdscheme.presets import get_preset
from tdscheme.runtime import local_ray_config

RANK = {"num_cpus": 1}


def samples_per_s(name: str, batch, num_learners: int, updates: int) -> tuple[float, int]:
    """The updates' samples/s of a fresh group of ``num_learners`` ranks, and a rank's threads."""
    factories = get_preset(name).factories()
    torch.manual_seed(0)
    learner = factories["learner_factory"](**factories["policy_factory"]())
    group = LearnerGroup(
        learner, num_learners=num_learners, policy_factory=factories["policy_factory"],
        learner_factory=factories["learner_factory"], resources=RANK, timeout_s=600.0,
    )  # fmt: skip
    try:
        threads = ray.get(
            group.pool.actors()[0].__ray_call__.remote(lambda self: torch.get_num_threads()),
            timeout=60,
        )
        group.update(batch)  # warm-up
        start = time.perf_counter()
        for _ in range(updates):
            group.update(batch)
        return batch.numel() * updates / (time.perf_counter() - start), threads
    finally:
        group.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="appo-pong")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=3, help="timed updates per group")
    parser.add_argument(
        "--frames-scale", type=int, default=1, help="the batch repeated this many times over envs"
    )
    args = parser.parse_args()
    ray.init(**{**local_ray_config(), "num_cpus": 2, "log_to_driver": False})
    json_line({"machine": machine_info()})
    rows = []
    try:
        for name in args.presets.split(","):
            policy = get_preset(name).factories()["policy_factory"]()["actor"]
            batch = real_batch(name, policy)
            if args.frames_scale > 1:
                batch = torch.cat([batch] * args.frames_scale, dim=0)
            rates: dict[int, list[float]] = {1: [], 2: []}
            threads = 0
            for _ in range(args.repeats):
                for ranks in (1, 2):
                    rate, threads = samples_per_s(name, batch, ranks, args.updates)
                    rates[ranks].append(rate)
            ratio = paired_ratios(rates[2], rates[1])
            row = {
                "preset": name, "batch": list(batch.shape), "frames": batch.numel(),
                "rank_threads": threads, "updates": args.updates, "repeats": args.repeats,
                "one_rank_samples_s": statistics.median(rates[1]),
                "two_ranks_samples_s": statistics.median(rates[2]),
                "speedup_ratio_of_medians": ratio.ratio_of_medians,
                "speedup_median_of_ratios": ratio.median_of_ratios,
                "speedup_range": [ratio.low, ratio.high], "rates": rates,
            }  # fmt: skip
            json_line(row)
            rows.append(row)
    finally:
        ray.shutdown()
    print("\n| preset | batch | threads per rank | 1 rank samples/s | 2 ranks samples/s | "
          "2 / 1 (ratio of medians) | median of ratios (range) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["speedup_range"]
        print(f"| {r['preset']} | {r['batch']} | {r['rank_threads']} | "
              f"{r['one_rank_samples_s']:.0f} | {r['two_ranks_samples_s']:.0f} | "
              f"{r['speedup_ratio_of_medians']:.2f}x | {r['speedup_median_of_ratios']:.2f}x "
              f"({low:.2f}-{high:.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
