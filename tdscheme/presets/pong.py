"""The Pong presets: pixels from EnvPool, the IMPALA paper's or Mnih et al.'s CNN.

impala-pong is the root; appo-pong trains PPO's clipped loss on its V-trace targets,
ppo-pong is synchronous, strictly on-policy PPO with CleanRL's and the RL Zoo's Atari
settings, and apex-dqn-pong is Ape-X DQN (sharded prioritized replay written by the
workers). ``frames`` count agent steps (x4 emulator frames).

Example:
    >>> preset = ppo_pong()
    >>> preset.algo.pixel_network, preset.scheme.sync, preset.scheme.frames_per_batch
    ('nature', True, 1024)
    >>> appo_pong().scheme.async_learner
    True
"""

from __future__ import annotations

from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.presets.a2c import a2c_learner
from tdscheme.presets.offpolicy import OffPolicyPreset, dqn_learner
from tdscheme.presets.ppo import ppo_learner
from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import ActorCriticConfig, OffPolicyConfig
from tdscheme.scheme.config import SchemeConfig

__all__ = ["apex_dqn_pong", "appo_pong", "impala_pong", "ppo_pong"]


def impala_pong() -> Preset:
    """IMPALA on Pong from pixels (``ALE/Pong-v5`` in EnvPool): the paper's shallow CNN.

    4 stacked 84x84 grey uint8 frames, 4 frames skipped per step, rewards clipped
    to [-1, 1] for training (:func:`~tdscheme.envs.make_atari_env`); 2 workers of 16
    envs, each batch 16 envs x 20 steps (IMPALA's unroll length), one A2C step on
    V-trace per batch; the IMPALA paper's coefficients (entropy 0.01, value 0.5,
    gradient clip 40, lr 6e-4 decayed to 0 over the run), with Adam. ``frames`` count
    agent steps (x4 for emulator frames). ``--env-backend gymnasium`` runs ale-py
    instead of EnvPool (the same preprocessing).
    """
    return Preset(
        name="impala-pong",
        learner_builder=a2c_learner,
        algo=ActorCriticConfig(
            env_id="ALE/Pong-v5", env_backend="envpool", num_envs=16, eval_num_envs=4,
            lr=6e-4, max_grad_norm=40.0, num_epochs=1, minibatch_size=None,
            entropy_coef=0.01, normalize_advantage=False, advantage="vtrace",
        ),
        scheme=SchemeConfig(num_collectors=2, frames_per_batch=320, async_learner=True),
        trainer=TrainerConfig(
            total_frames=10_000_000, eval_every_frames=200_000, eval_episodes=4,
            target_return=18.0, checkpoint_every_frames=200_000,
        ),
    )  # fmt: skip


def appo_pong() -> Preset:
    """APPO on Pong: IMPALA's envs, workers and network, PPO's clipped loss on V-trace.

    Batches of 16 envs x 32 steps, 2 epochs of 256-frame minibatches each, CleanRL's
    Atari PPO coefficients (clip 0.1, lr 2.5e-4 decayed, gradient clip 0.5,
    normalized advantages).
    """
    return impala_pong().derive(
        "appo-pong", learner_builder=ppo_learner,
        lr=2.5e-4, max_grad_norm=0.5, num_epochs=2, minibatch_size=256, clip_epsilon=0.1,
        normalize_advantage=True, frames_per_batch=512,
    )  # fmt: skip


def ppo_pong() -> Preset:
    """Synchronous PPO on Pong from pixels: CleanRL's and the RL Zoo's Atari PPO settings.

    appo-pong's envs and loss, strictly on-policy: 8 envs in all (2 workers of 4,
    EnvPool) x 128 steps per batch (the workers wait for the new weights); 4 epochs of
    4 minibatches of 256 frames; Adam at 2.5e-4 (epsilon 1e-5) decayed linearly to 0
    over the run, PPO clip 0.1, entropy 0.01, value 0.5, gradient clip 0.5, GAE (0.99,
    0.95), normalized advantages; Mnih et al.'s CNN shared by the policy and value
    heads, orthogonal initialization; the Atari preprocessing of
    :func:`~tdscheme.envs.make_atari_env` (rewards clipped for training). These are
    the hyperparameters of CleanRL's ``ppo_atari_envpool.py`` and of the RL Zoo's
    ``atari`` entry in ``ppo.yml``. ``frames`` count agent steps (x4 emulator frames).
    The learner takes both torch threads (``num_threads=2``): strictly on-policy, the
    workers wait while it trains.
    """
    return appo_pong().derive(
        "ppo-pong",
        num_envs=4, num_epochs=4, pixel_network="nature", adam_eps=1e-5, advantage="gae",
        frames_per_batch=1024, async_learner=False, sync=True, max_policy_lag=0,
        total_frames=2_000_000, eval_every_frames=100_000, checkpoint_every_frames=100_000,
        num_threads=2,
    )  # fmt: skip


def apex_dqn_pong() -> OffPolicyPreset:
    """Ape-X DQN on Pong from pixels (EnvPool), scaled from Horgan et al. 2018 to 2 cores.

    Ape-X's learner and replay: a dueling double-DQN head on Mnih et al.'s convolutions
    (:func:`~tdscheme.presets.offpolicy_modules.pixel_qnet`), 3-step returns computed in
    each worker, two prioritized replay shards (alpha 0.6, beta 0.4) that the workers
    write with the TD errors of their own copy of the network, a fixed epsilon per worker
    ``0.4 ** (1 + 7 i / (N - 1))``, gradients clipped at 40, a target copy every 2,500
    updates. Scaled down: 2 workers of 8 envs (Ape-X: 360 actors of one), 100,000 frames
    of replay (2 M), minibatches of 32 (512) at one update per 4 agent steps (DQN's
    ratio), 20,000 frames before the first update (50,000), Adam at 1e-4. Atari's
    preprocessing as the other Pong presets (:func:`~tdscheme.envs.make_atari_env`).
    """
    return OffPolicyPreset(
        name="apex-dqn-pong",
        algo_name="dqn",
        learner_builder=dqn_learner,
        algo=OffPolicyConfig(
            env_id="ALE/Pong-v5", env_backend="envpool", num_envs=8, eval_num_envs=4,
            lr=1e-4, max_grad_norm=40.0, batch_size=32, buffer_size=100_000,
            prioritized=True, replay_shards=2, n_steps=3, dueling=True, worker_eps=0.4,
            target_update="hard", hard_update_interval=2_500,
        ),
        scheme=SchemeConfig(
            num_collectors=2, frames_per_batch=256, utd_ratio=0.25, init_random_frames=20_000,
            buffer_location="ray",
        ),
        trainer=TrainerConfig(
            total_frames=10_000_000, eval_every_frames=200_000, eval_episodes=4,
            target_return=18.0, checkpoint_every_frames=200_000,
        ),
    )  # fmt: skip
