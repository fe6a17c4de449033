"""Your own torchrl SAC loop: workers write into a Ray-held replay buffer in the background.

torchrl's ``SACLoss``, ``SoftUpdate`` and ``RayReplayBuffer``; a tdscheme RayCollector
collects in the background (``start()``) while this loop samples, updates and pushes weights.
No frame passes through this process on its way into the buffer.

Run: python examples/sac_pendulum_replay.py --total-frames 20000
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from torchrl.data import LazyTensorStorage
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.envs import RewardSum, TransformedEnv
from torchrl.objectives import SACLoss, SoftUpdate

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.presets.offpolicy_modules import offpolicy_modules
from tdscheme.replay import ray_buffer_kwargs


def make_pendulum():
    """4 Pendulum copies in one process, each episode's return summed (torchrl's RewardSum)."""
    return TransformedEnv(make_env("Pendulum-v1", num_envs=4), RewardSum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=20_000)
    parser.add_argument("--random-frames", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    nets = offpolicy_modules("Pendulum-v1", algo="sac", hidden_sizes=(256, 256))
    loss = SACLoss(nets["actor"], nets["qvalue"], num_qvalue_nets=2, action_spec=nets["actor"].spec)
    loss.make_value_estimator(gamma=0.99)
    target = SoftUpdate(loss, tau=0.005)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    buffer = RayReplayBuffer(  # an actor of its own, holding no CPU
        storage=functools.partial(LazyTensorStorage, 100_000, ndim=2),  # frames, not env rows
        batch_size=args.batch_size,
        **ray_buffer_kwargs(),
    )
    collector = RayCollector(
        make_pendulum, nets["actor"],
        frames_per_batch=128, total_frames=args.total_frames, num_collectors=2,
        init_random_frames=args.random_frames, replay_buffer=buffer,
        remote_configs={"num_cpus": 0.5},
    )  # fmt: skip
    try:
        updates, last_print, returns = 0, time.monotonic(), []
        # returns at once; the workers fill the buffer, held while 256 frames wait for updates
        collector.start(hold_while=lambda: collector.collected_frames - args.random_frames - updates > 256)
        while True:  # one gradient step per frame collected after the random ones
            if updates >= collector.collected_frames - args.random_frames:
                if not collector.is_running:
                    break
                time.sleep(0.01)
                continue
            out = loss(buffer.sample())
            total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
            optim.zero_grad()
            total.backward()
            optim.step()
            target.step()
            updates += 1
            if updates % 16 == 0:
                collector.update_policy_weights_()  # the background workers run them next
            returns += collector.written_episodes().returns if updates % 64 == 0 else []
            if time.monotonic() - last_print > 5 and returns:
                recent = returns[-8:]
                print(f"{collector.collected_frames} frames, {updates} updates, "
                      f"return {sum(recent) / len(recent):.0f} (last {len(recent)} episodes)")  # fmt: skip
                last_print = time.monotonic()
        print(f"done: {collector.collected_frames} frames written, {updates} updates")
    finally:
        collector.shutdown()
        buffer.shutdown()


if __name__ == "__main__":
    main()
