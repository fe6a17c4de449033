"""IMPALA and APPO presets: the asynchronous actor-learner with V-trace.

Both train on first-ready batches through the
:class:`~tdscheme.scheme.async_driver.AsyncDriver` (``async_learner=True``): the
workers never wait for fresh weights, and the learner corrects for the policy
that collected each batch with torchrl's ``VTrace`` estimator over the behaviour
log-probs the workers record. IMPALA (Espeholt et al. 2018) trains torchrl's
``A2CLoss`` on V-trace's targets, one gradient step per batch (the A2C preset's
learner builder, with ``advantage="vtrace"``); APPO trains ``ClipPPOLoss`` (its
ratio taken against the behaviour policy) on them, a few epochs of minibatches per
batch (the PPO preset's builder).

Example:
    >>> preset = impala_cartpole()
    >>> preset.scheme.async_learner, preset.algo.advantage
    (True, 'vtrace')
    >>> learner = preset.learner_factory()(**preset.policy_factory()())
    >>> type(learner.loss_module).__name__, type(learner.value_estimator).__name__
    ('A2CLoss', 'VTrace')
    >>> appo = appo_cartpole()
    >>> type(appo.learner_factory()(**appo.policy_factory()()).loss_module).__name__
    'ClipPPOLoss'
"""

from __future__ import annotations

import dataclasses

from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.presets.a2c import a2c_learner
from tdscheme.presets.ppo import ppo_learner
from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import ActorCriticConfig
from tdscheme.scheme.config import SchemeConfig

__all__ = ["appo_cartpole", "appo_pong", "impala_cartpole", "impala_pong"]


def impala_cartpole() -> Preset:
    """IMPALA on CartPole-v1: 2 workers of 16 envs, one A2C step on V-trace per 512 frames.

    The learner takes each worker's 16 x 32-step batch as it comes; each worker
    collects up to 2 batches ahead of it, and weights are pushed after every update,
    so a batch is typically 1-2 updates old. Stops at the first evaluation whose mean
    return over 10 episodes reaches 475.
    """
    return Preset(
        name="impala-cartpole",
        learner_builder=a2c_learner,
        algo=ActorCriticConfig(
            env_id="CartPole-v1",
            num_envs=16,
            lr=1e-3,
            anneal_frames=400_000,
            lr_end_factor=0.1,
            num_epochs=1,
            minibatch_size=None,
            entropy_coef=0.01,
            normalize_advantage=False,
            advantage="vtrace",
        ),
        scheme=SchemeConfig(num_collectors=2, frames_per_batch=512, async_learner=True),
        trainer=TrainerConfig(
            total_frames=400_000,
            eval_every_frames=20_480,
            eval_episodes=10,
            target_return=475.0,
        ),
    )


def appo_cartpole() -> Preset:
    """APPO on CartPole-v1: IMPALA's workers and queue, PPO's clipped loss on V-trace.

    Each 1024-frame batch (16 envs x 64 steps) gets 4 epochs of 256-frame minibatches.
    """
    impala = impala_cartpole()
    return dataclasses.replace(
        impala,
        name="appo-cartpole",
        learner_builder=ppo_learner,
        algo=dataclasses.replace(
            impala.algo,
            lr=1e-3,
            num_epochs=4,
            minibatch_size=256,
            entropy_coef=0.0,
            normalize_advantage=True,
            anneal_frames=200_000,
        ),  # fmt: skip
        scheme=dataclasses.replace(impala.scheme, frames_per_batch=1024),
        trainer=dataclasses.replace(impala.trainer, total_frames=200_000, eval_every_frames=16_384),
    )


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
            env_id="ALE/Pong-v5",
            env_backend="envpool",
            num_envs=16,
            eval_num_envs=4,
            lr=6e-4,
            max_grad_norm=40.0,
            num_epochs=1,
            minibatch_size=None,
            entropy_coef=0.01,
            normalize_advantage=False,
            advantage="vtrace",
        ),
        scheme=SchemeConfig(num_collectors=2, frames_per_batch=320, async_learner=True),
        trainer=TrainerConfig(
            total_frames=10_000_000,
            eval_every_frames=200_000,
            eval_episodes=4,
            target_return=18.0,
            checkpoint_every_frames=200_000,
        ),
    )


def appo_pong() -> Preset:
    """APPO on Pong: IMPALA's envs, workers and network, PPO's clipped loss on V-trace.

    Batches of 16 envs x 32 steps, 2 epochs of 256-frame minibatches each, CleanRL's
    Atari PPO coefficients (clip 0.1, lr 2.5e-4 decayed, gradient clip 0.5,
    normalized advantages).
    """
    impala = impala_pong()
    return dataclasses.replace(
        impala,
        name="appo-pong",
        learner_builder=ppo_learner,
        algo=dataclasses.replace(
            impala.algo,
            lr=2.5e-4,
            max_grad_norm=0.5,
            num_epochs=2,
            minibatch_size=256,
            clip_epsilon=0.1,
            normalize_advantage=True,
        ),  # fmt: skip
        scheme=dataclasses.replace(impala.scheme, frames_per_batch=512),
    )
