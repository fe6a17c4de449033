"""Iterate a tdscheme RayCollector on CartPole with 2 workers and print the throughput.

Run: python examples/collect_cartpole.py --total-frames 50000
"""

from __future__ import annotations

import argparse
import functools
import time

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.presets.actor_critic import actor_critic_modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=100_000)
    parser.add_argument("--num-collectors", type=int, default=2)
    parser.add_argument("--envs-per-collector", type=int, default=32)
    parser.add_argument("--frames-per-batch", type=int, default=4096)
    args = parser.parse_args()

    env_factory = functools.partial(make_env, "CartPole-v1", num_envs=args.envs_per_collector)
    # the presets' stochastic actor (2x64 tanh MLP, one-hot categorical actions)
    policy = actor_critic_modules("CartPole-v1")["actor"]
    start = time.perf_counter()
    with RayCollector(
        env_factory,
        policy,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.total_frames,
        num_collectors=args.num_collectors,
    ) as collector:
        for i, batch in enumerate(collector):
            worker = batch["collector", "worker_id"].flatten()[0].item()
            print(f"batch {i}: {batch.numel()} frames from worker {worker}")
        stats = collector.stats()
    elapsed = time.perf_counter() - start
    print(
        f"{stats['frames']} frames in {elapsed:.1f} s from start "
        f"({stats['fps']:.0f} frames/s while collecting, {stats['frames'] / elapsed:.0f} overall)"
    )


if __name__ == "__main__":
    main()
