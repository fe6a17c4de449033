"""Your own torchrl PPO loop, with a tdscheme RayCollector in place of torchrl's collector.

Everything but the collector is torchrl's: GAE, ClipPPOLoss, a torch optimizer. The
README shows ``main``'s loop.

Run: python examples/ppo_own_loop.py --total-frames 100000
"""

from __future__ import annotations

import argparse

import torch
from torchrl.envs import RewardSum, TransformedEnv
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.presets.actor_critic import actor_critic_modules


def make_cartpole():
    """16 CartPole copies in one process, each episode's return summed (torchrl's RewardSum)."""
    return TransformedEnv(make_env("CartPole-v1", num_envs=16), RewardSum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=100_000)
    parser.add_argument("--frames-per-batch", type=int, default=4096)
    args = parser.parse_args()

    nets = actor_critic_modules("CartPole-v1")  # or your own actor and critic
    loss = ClipPPOLoss(nets["actor"], nets["critic"])
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=nets["critic"])
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    with RayCollector(make_cartpole, nets["actor"], frames_per_batch=args.frames_per_batch,
                      total_frames=args.total_frames, num_collectors=2) as collector:  # fmt: skip
        for batch in collector:  # [num_envs, time] from whichever worker is ready first
            with torch.no_grad():
                gae(batch)
            data = batch.reshape(-1)
            for _ in range(4):  # epochs of minibatches of 512 frames
                for idx in torch.randperm(data.numel()).split(512):
                    out = loss(data[idx])
                    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                    optim.zero_grad()
                    total.backward()
                    optim.step()
            collector.update_policy_weights_()  # the actor's new weights to every worker
            done = batch["next", "done"]
            returns = batch["next", "episode_reward"][done]
            print(f"{collector.collected_frames} frames, mean return {returns.mean():.1f}")


if __name__ == "__main__":
    main()
