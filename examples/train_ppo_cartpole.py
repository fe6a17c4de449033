"""Train PPO on CartPole with the Python API: a preset's factories, a Scheme and a Trainer.

The same run as `tdscheme train ppo-cartpole`, written out so each piece can be swapped for
your own (any torchrl env factory, policy modules, and a Learner over any torchrl loss).

Run: python examples/train_ppo_cartpole.py --total-frames 100000
"""

from __future__ import annotations

import argparse
import tempfile

from tdscheme import Scheme, SchemeConfig, Trainer, TrainerConfig
from tdscheme.presets import get_preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=100_000)
    parser.add_argument("--num-collectors", type=int, default=2)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    preset = get_preset("ppo-cartpole")  # env/policy/learner factories + tuned hyperparameters
    factories = preset.factories()  # env_factory, eval_env_factory, policy_factory, learner_factory
    scheme_config = SchemeConfig(
        num_collectors=args.num_collectors,
        frames_per_batch=preset.scheme.frames_per_batch,
        sync=preset.scheme.sync,
        max_policy_lag=preset.scheme.max_policy_lag,
        collector_resources={"num_cpus": 0.5},
    )
    trainer_config = TrainerConfig(
        total_frames=args.total_frames,
        run_dir=args.run_dir or tempfile.mkdtemp(prefix="tdscheme-"),
        eval_every_frames=preset.trainer.eval_every_frames,
        target_return=475.0,  # stop early once the deterministic policy reaches it
    )
    with Trainer(Scheme(**factories, config=scheme_config), config=trainer_config) as trainer:
        summary = trainer.run()
    print({k: summary[k] for k in sorted(summary) if not isinstance(summary[k], dict)})


if __name__ == "__main__":
    main()
