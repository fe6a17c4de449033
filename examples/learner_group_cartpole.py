"""Train CartPole with PPO whose every update runs on a learner group of 2 ranks.

The driver collects with a RayCollector and hands each batch to a LearnerGroup:
each rank trains on its half of the env rows, the ranks all-reduce their gradients
over gloo and take the steps one Learner would take on the whole batch.

Run: python examples/learner_group_cartpole.py --updates 30
"""

from __future__ import annotations

import argparse
import functools

from tdscheme import RayCollector
from tdscheme.learner import LearnerGroup
from tdscheme.learner.snapshots import cpu_module
from tdscheme.presets import get_preset
from tdscheme.presets.actor_critic import train_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--num-learners", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()

    preset = get_preset("ppo-cartpole")
    policy_factory, learner_factory = preset.policy_factory(), preset.learner_factory()
    learner = learner_factory(**policy_factory())  # the driver's mirror: its policy collects
    group = LearnerGroup(
        learner, num_learners=args.num_learners, policy_factory=policy_factory,
        learner_factory=learner_factory, resources={"num_cpus": 0.5},
    )  # fmt: skip
    collector = RayCollector(
        functools.partial(train_env, "CartPole-v1", num_envs=args.num_envs),
        cpu_module(learner.policy),  # workers get a CPU copy, never the learner's module
        frames_per_batch=1024, total_frames=args.updates * 1024, num_collectors=1,
        remote_configs={"num_cpus": 0.5},
    )  # fmt: skip
    try:
        for update, batch in enumerate(collector):
            metrics = group.update(batch)
            collector.update_policy_weights_(group.policy_weights())
            ended = batch["next", "done"]
            returns = batch["next", "episode_reward"][ended]
            mean_return = float(returns.mean()) if returns.numel() else float("nan")
            print(
                f"update {update}: version {group.version}, loss {float(metrics['loss']):.3f}, "
                f"return {mean_return:.1f}"
            )
    finally:
        collector.shutdown()
        group.shutdown()


if __name__ == "__main__":
    main()
