"""IMPALA on Pong's pixels in your own loop: first-ready Ray workers, a CNN, V-trace.

What `tdscheme train impala-pong` does, written out: 4x84x84 uint8 frame stacks from
EnvPool (``--backend gymnasium`` for ale-py), the IMPALA paper's shallow CNN shared by
the policy and value heads, workers that collect ahead of the learner while it trains,
and V-trace correcting for the weights each batch was collected with. The frames stay
uint8 from the env to the loss (a quarter of float32's bytes on the wire).

Run: python examples/impala_pong.py --total-frames 2000000   (Pong needs millions of frames)
"""

from __future__ import annotations

import argparse
import functools

from torchrl.objectives import A2CLoss

from tdscheme import Learner, LearnerConfig, RayCollector
from tdscheme.envs import make_atari_env
from tdscheme.keys import POLICY_VERSION_KEY
from tdscheme.learner import vtrace_estimator
from tdscheme.presets.pixel_networks import pixel_actor_critic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-frames", type=int, default=2_000_000)
    parser.add_argument("--num-envs", type=int, default=16, help="envs per worker")
    parser.add_argument("--backend", choices=["envpool", "gymnasium"], default="envpool")
    args = parser.parse_args()

    modules = pixel_actor_critic(num_actions=6)  # Pong's 6 actions; a CNN trunk, two heads
    actor, critic = modules["actor"], modules["critic"]
    learner = Learner(
        A2CLoss(actor, critic, entropy_coeff=0.01, critic_coeff=0.5),
        config=LearnerConfig(num_epochs=1, minibatch_size=None, lr=6e-4, max_grad_norm=40.0),
        value_estimator=vtrace_estimator(gamma=0.99, actor=actor, critic=critic),
    )
    make_env = functools.partial(
        make_atari_env, "ALE/Pong-v5", num_envs=args.num_envs, backend=args.backend
    )
    with RayCollector(
        make_env, actor, frames_per_batch=args.num_envs * 20,  # 20 steps per env: IMPALA's unroll
        total_frames=args.total_frames, num_collectors=2, sync=False, max_policy_lag=4,
        remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        for i, batch in enumerate(collector):
            lag = collector.policy_version - batch[POLICY_VERSION_KEY].float().mean().item()
            metrics = learner.update(batch)
            collector.update_policy_weights_(learner.policy_weights())
            done = batch["next", "done"].squeeze(-1)
            if i % 10 == 0:
                ended = batch["next", "episode_reward"].squeeze(-1)[done]
                score = f"{ended.mean().item():6.1f}" if ended.numel() else "     -"
                print(f"frames {collector.counters()['frames']:>8}  score {score}  "
                      f"lag {lag:.2f}  loss {metrics['loss'].item():.3f}  "
                      f"obs {batch['observation'].dtype}")  # fmt: skip
        ledger = collector.stats()["ledger"]
    print({"frames_collected": ledger["collected"], "dropped_stale": ledger["dropped"],
           "ledger_balanced": ledger["balanced"]})  # fmt: skip


if __name__ == "__main__":
    main()
