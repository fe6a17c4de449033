"""Train CartPole with 2 gradient workers (synchronous, asynchronous or decentralized).

Each gradient worker is a Ray actor that collects with its own envs and computes
A2C gradients with its own copy of the learner; the mode decides how the
gradients become updates.

Run: python examples/gradient_workers_cartpole.py --mode asynchronous --steps 200
"""

from __future__ import annotations

import argparse
import functools

from tdscheme.gradient_workers import GradientWorkersConfig, build_gradient_coordinator
from tdscheme.presets import get_preset
from tdscheme.presets.actor_critic import train_env

MODES = {
    "synchronous": {"communication": "synchronous"},
    "asynchronous": {"communication": "asynchronous"},
    "decentralized": {"communication": "synchronous", "decentralized": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=sorted(MODES), default="synchronous")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--num-grad-workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames-per-batch", type=int, default=256)
    args = parser.parse_args()

    config = GradientWorkersConfig(
        num_grad_workers=args.num_grad_workers,
        frames_per_batch=args.frames_per_batch,
        worker_resources={"num_cpus": 1},
        seed=0,
        **MODES[args.mode],
    )
    # Factories (not objects) go to the workers: each builds its own env, modules and learner.
    # The a2c-cartpole preset gives the actor-critic networks and the A2C + GAE learner;
    # train_env records episode returns (RewardSum), which the metrics report.
    preset = get_preset("a2c-cartpole")
    env_factory = functools.partial(train_env, "CartPole-v1", num_envs=args.num_envs)
    policy_factory = preset.policy_factory()
    learner_factory = preset.learner_factory()
    learner = learner_factory(**policy_factory())  # the driver's learner
    with build_gradient_coordinator(
        config,
        env_factory=env_factory,
        policy_factory=policy_factory,
        learner_factory=learner_factory,
        learner=learner,
    ) as coordinator:
        for step in range(args.steps):
            metrics = coordinator.step()
            ret = metrics.get("episode_return_mean", float("nan"))
            print(
                f"step {step}: version {metrics['version']:.0f}, frames {metrics['frames']:.0f}, "
                f"return {ret:.1f}, wait {metrics['wait_ms']:.0f} ms, "
                f"apply {metrics['apply_ms']:.1f} ms"
            )
        print(f"totals: {coordinator.stats()}")


if __name__ == "__main__":
    main()
