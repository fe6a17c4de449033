"""IMPALA on CartPole in your own loop: a first-ready RayCollector, A2CLoss, V-trace.

What `tdscheme train impala-cartpole` does, written out with the collector and the learner
only: the workers collect ahead of the learner (2 batches each at most), the learner trains
on each batch as it comes, whatever weights collected it, and V-trace corrects for them.

Run: python examples/impala_cartpole.py --total-frames 200000
"""

from __future__ import annotations

import argparse
import functools

from torchrl.objectives import A2CLoss

from tdscheme import Learner, LearnerConfig, RayCollector
from tdscheme.keys import POLICY_VERSION_KEY
from tdscheme.learner import vtrace_estimator
from tdscheme.presets.actor_critic import actor_critic_modules, train_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=200_000)
    parser.add_argument("--num-collectors", type=int, default=2)
    args = parser.parse_args()

    modules = actor_critic_modules("CartPole-v1")  # actor (records action_log_prob), critic
    actor, critic = modules["actor"], modules["critic"]
    learner = Learner(
        A2CLoss(actor, critic, entropy_coeff=0.01),
        config=LearnerConfig(num_epochs=1, minibatch_size=None, lr=1e-3, max_grad_norm=0.5),
        value_estimator=vtrace_estimator(gamma=0.99, actor=actor, critic=critic),
    )
    env_factory = functools.partial(train_env, "CartPole-v1", num_envs=16)
    with RayCollector(
        env_factory, actor, frames_per_batch=512, total_frames=args.total_frames,
        num_collectors=args.num_collectors, sync=False,  # first-ready: never wait for the slowest
        max_policy_lag=4, prefetch_batches=2,  # drop batches >4 pushes old; 2 ahead, then wait
        remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        for i, batch in enumerate(collector):
            lag = collector.policy_version - batch[POLICY_VERSION_KEY].float().mean().item()
            metrics = learner.update(batch)  # V-trace on the behaviour log-probs, one A2C step
            collector.update_policy_weights_(learner.policy_weights())
            done = batch["next", "done"].squeeze(-1)
            if i % 20 == 0 and done.any():
                ret = batch["next", "episode_reward"].squeeze(-1)[done].mean().item()
                print(f"frames {collector.counters()['frames']:>7}  return {ret:6.1f}  "
                      f"lag {lag:.2f}  loss {metrics['loss'].item():.3f}")  # fmt: skip
        ledger = collector.stats()["ledger"]
    print({"dropped_stale_frames": ledger["dropped"], "ledger_balanced": ledger["balanced"]})


if __name__ == "__main__":
    main()
