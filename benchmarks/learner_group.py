"""Learner groups on a learner-bound workload: 2 ranks against 1, the same batch, the same steps.

A real batch of the preset's frames is collected once (appo-pong: 1,024 frames of EnvPool
Pong, uint8 4x84x84; see ``pixel_learner.real_batch``). Then, in alternating repeats, a
:class:`~tdscheme.learner.LearnerGroup` of 1 rank and one of 2 ranks (each rank a Ray actor
with ``{"num_cpus": 1}``, so one torch thread) are built from the same initial weights and
each takes ``--updates`` updates on that batch; both take exactly the same optimizer steps
(2 ranks split each minibatch and all-reduce the gradient). The figure is the updates'
samples per second (frames x updates / seconds, the wall time of ``group.update`` on the
driver, shards sent included), and the ratio 2 ranks / 1 rank, paired by repeat.

The control, in the same repeats: the machine's ceiling for any data-parallel learner. Two
independent Ray tasks (one CPU, one torch thread each, no process group) each train a plain
Learner on half the env rows, against one task training on the whole batch; the ratio of
their samples/s is what two processes get out of the two cores with no communication at all
(a group can at best reach it).

Run from the repository root::

    .venv/bin/python benchmarks/learner_group.py                       # appo-pong, 3 repeats
    .venv/bin/python benchmarks/learner_group.py --presets ppo-cartpole --frames-scale 16
    .venv/bin/python benchmarks/learner_group.py --presets '' --sac-batch 4096   # SAC only

SAC (``--sac-batch``): sac-pendulum's learner with sac-halfcheetah's 256 x 256 networks, a
Ray-held buffer of real Pendulum transitions; each group takes ``--sac-updates`` replay steps
(each rank samples its share of the minibatch from the buffer itself, the sampling included
in the time); the control: independent Learners on local buffers, each on its share.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import ray
import torch
from harness import json_line, paired_ratios
from pixel_learner import real_batch
from report import machine_info

from tdscheme.learner import LearnerGroup
from tdscheme.learner.group import split_rows
from tdscheme.presets import get_preset
from tdscheme.runtime import local_ray_config
from tdscheme.testing.sac import pendulum_transitions

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


@ray.remote(num_cpus=1)
def _alone(name: str, shard, updates: int) -> float:
    """Seconds of ``updates`` updates of one plain Learner on ``shard``, one torch thread."""
    torch.set_num_threads(1)
    factories = get_preset(name).factories()
    torch.manual_seed(0)
    learner = factories["learner_factory"](**factories["policy_factory"]())
    learner.update(shard)  # warm-up
    start = time.perf_counter()
    for _ in range(updates):
        learner.update(shard)
    return time.perf_counter() - start


def control_samples_per_s(name: str, batch, processes: int, updates: int) -> float:
    """Samples/s of ``processes`` independent Learners, each on its share of the env rows."""
    shards = split_rows(batch, processes)
    seconds = ray.get([_alone.remote(name, shard, updates) for shard in shards], timeout=3600)
    return batch.numel() * updates / max(seconds)


def sac_factories(hidden: int):
    """sac-pendulum's SAC with ``hidden`` x ``hidden`` networks (sac-halfcheetah's size: 256)."""
    return get_preset("sac-pendulum").override({"hidden_sizes": [hidden, hidden]}).factories()


def sac_samples_per_s(frames, num_learners: int, batch: int, updates: int, hidden: int) -> float:
    """Samples/s of ``updates`` replay steps of a group, its ranks sampling a Ray-held buffer."""
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme.replay.bounded import BoundedRayBuffer
    from tdscheme.replay.ray_held import ray_buffer_kwargs

    factories = sac_factories(hidden)
    torch.manual_seed(0)
    learner = factories["learner_factory"](**factories["policy_factory"]())
    held = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, frames.shape[0]), batch_size=batch,
        **ray_buffer_kwargs(),
    )  # fmt: skip
    buffer = BoundedRayBuffer(held, timeout_s=600.0, prefetch=1)  # as the training loop has it
    group = None
    try:
        buffer.extend(frames)
        group = LearnerGroup(
            learner, num_learners=num_learners, policy_factory=factories["policy_factory"],
            learner_factory=factories["learner_factory"], resources=RANK, timeout_s=600.0,
        )  # fmt: skip
        group.replay_updates(buffer, 2)  # warm-up
        start = time.perf_counter()
        group.replay_updates(buffer, updates)
        return batch * updates / (time.perf_counter() - start)
    finally:
        if group is not None:
            group.shutdown()
        buffer.shutdown()


@ray.remote(num_cpus=1)
def _sac_alone(frames, batch: int, updates: int, hidden: int) -> float:
    """Seconds of ``updates`` replay steps of one OffPolicyLearner on a local buffer, one thread."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    torch.set_num_threads(1)
    factories = sac_factories(hidden)
    torch.manual_seed(0)
    learner = factories["learner_factory"](**factories["policy_factory"]())
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(frames.shape[0]), batch_size=batch)
    buffer.extend(frames)
    learner.replay_updates(buffer, 2)  # warm-up
    start = time.perf_counter()
    learner.replay_updates(buffer, updates)
    return time.perf_counter() - start


def sac_control_samples_per_s(frames, processes: int, batch: int, updates: int, hidden: int):
    """Samples/s of ``processes`` independent SAC learners, each on its share of the batch."""
    share = batch // processes
    calls = [_sac_alone.remote(frames, share, updates, hidden) for _ in range(processes)]
    return share * processes * updates / max(ray.get(calls, timeout=3600))


def sac_row(args) -> dict:
    """The SAC rows: 1 and 2 ranks (and the control), alternating, ``args.repeats`` times."""
    frames = pendulum_transitions(args.sac_frames)
    rates: dict[int, list[float]] = {1: [], 2: []}
    alone: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for ranks in (1, 2):
            rates[ranks].append(
                sac_samples_per_s(frames, ranks, args.sac_batch, args.sac_updates, args.sac_hidden)
            )
            alone[ranks].append(sac_control_samples_per_s(
                frames, ranks, args.sac_batch, args.sac_updates, args.sac_hidden
            ))  # fmt: skip
    return _row(f"sac-pendulum ({args.sac_hidden}x{args.sac_hidden}, replay)", [args.sac_batch],
                args.sac_batch, 1, args.sac_updates, args.repeats, rates, alone)  # fmt: skip


def _row(name, shape, frames, threads, updates, repeats, rates, alone) -> dict:
    ratio = paired_ratios(rates[2], rates[1])
    ceiling = paired_ratios(alone[2], alone[1])
    return {
        "preset": name, "batch": shape, "frames": frames,
        "rank_threads": threads, "updates": updates, "repeats": repeats,
        "one_rank_samples_s": statistics.median(rates[1]),
        "two_ranks_samples_s": statistics.median(rates[2]),
        "speedup_ratio_of_medians": ratio.ratio_of_medians,
        "speedup_median_of_ratios": ratio.median_of_ratios,
        "speedup_range": [ratio.low, ratio.high], "rates": rates,
        "control_ratio_of_medians": ceiling.ratio_of_medians,
        "control_median_of_ratios": ceiling.median_of_ratios,
        "control_range": [ceiling.low, ceiling.high], "control_rates": alone,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="appo-pong")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=3, help="timed updates per group")
    parser.add_argument(
        "--frames-scale", type=int, default=1, help="the batch repeated this many times over envs"
    )
    parser.add_argument(
        "--sac-batch",
        type=int,
        default=0,
        help="also SAC replay steps on minibatches of this many frames (0: no)",
    )
    parser.add_argument("--sac-hidden", type=int, default=256)
    parser.add_argument("--sac-updates", type=int, default=20)
    parser.add_argument("--sac-frames", type=int, default=20_000, help="frames in the buffer")
    args = parser.parse_args()
    ray.init(**{**local_ray_config(), "num_cpus": 2, "log_to_driver": False})
    json_line({"machine": machine_info()})
    rows = []
    try:
        for name in [p for p in args.presets.split(",") if p]:
            policy = get_preset(name).factories()["policy_factory"]()["actor"]
            batch = real_batch(name, policy)
            if args.frames_scale > 1:
                batch = torch.cat([batch] * args.frames_scale, dim=0)
            rates: dict[int, list[float]] = {1: [], 2: []}
            alone: dict[int, list[float]] = {1: [], 2: []}
            threads = 0
            for _ in range(args.repeats):
                for ranks in (1, 2):
                    rate, threads = samples_per_s(name, batch, ranks, args.updates)
                    rates[ranks].append(rate)
                    alone[ranks].append(control_samples_per_s(name, batch, ranks, args.updates))
            row = _row(name, list(batch.shape), batch.numel(), threads, args.updates,
                       args.repeats, rates, alone)  # fmt: skip
            json_line(row)
            rows.append(row)
        if args.sac_batch:
            rows.append(sac_row(args))
            json_line(rows[-1])
    finally:
        ray.shutdown()
    print("\n| preset | batch | threads per rank | 1 rank samples/s | 2 ranks samples/s | "
          "2 / 1 (ratio of medians) | median of ratios (range) | control: 2 independent / 1 "
          "(median of ratios, range) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["speedup_range"]
        c_low, c_high = r["control_range"]
        print(f"| {r['preset']} | {r['batch']} | {r['rank_threads']} | "
              f"{r['one_rank_samples_s']:.0f} | {r['two_ranks_samples_s']:.0f} | "
              f"{r['speedup_ratio_of_medians']:.2f}x | {r['speedup_median_of_ratios']:.2f}x "
              f"({low:.2f}-{high:.2f}) | {r['control_ratio_of_medians']:.2f}x, "
              f"{r['control_median_of_ratios']:.2f}x ({c_low:.2f}-{c_high:.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
