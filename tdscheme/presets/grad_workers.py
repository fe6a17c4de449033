"""Gradient-worker presets: A3C (asynchronous A2C) and decentralized PPO on CartPole.

Each gradient worker is a Ray actor that steps its own envs and computes one
gradient per batch with its own copy of the learner (one backward pass over the
whole batch: ``num_epochs`` and ``minibatch_size`` are not used by gradient
workers). ``frames_per_batch`` is the frames of one learner update: split over
the workers in synchronous modes, one worker's batch in asynchronous mode (see
:class:`~tdscheme.SchemeConfig`).

Example:
    >>> preset = a3c_cartpole()
    >>> preset.scheme.num_grad_workers, preset.scheme.grad_mode
    (2, 'asynchronous')
    >>> ppo_cartpole_dd().scheme.grad_mode
    'decentralized'
"""

from __future__ import annotations

from tdscheme.presets.a2c import a2c_cartpole
from tdscheme.presets.ppo import ppo_learner
from tdscheme.presets.preset import Preset

__all__ = ["a3c_cartpole", "ppo_cartpole_dd"]


def a3c_cartpole() -> Preset:
    """A3C on CartPole-v1: two asynchronous gradient workers, A2C loss, no staleness bound.

    :func:`~tdscheme.presets.a2c.a2c_cartpole`'s loss, envs and hyperparameters with
    asynchronous gradient workers, evaluated twice as often. Each worker steps 16 envs
    for 16 steps and sends the A2C gradient of those 256 frames; the driver applies
    each gradient as it arrives and sends fresh weights back to its sender only. One
    Scheme iteration applies two gradients.
    """
    return a2c_cartpole().derive(
        "a3c-cartpole",
        num_collectors=1, frames_per_batch=256, num_grad_workers=2,
        grad_communication="asynchronous", eval_every_frames=10_240,
    )  # fmt: skip


def ppo_cartpole_dd() -> Preset:
    """PPO on CartPole-v1 with two decentralized gradient workers (gloo all-reduce).

    a3c-cartpole's workers with PPO's loss, synchronous and decentralized: each worker
    steps 16 envs for 32 steps; the workers all-reduce the PPO gradients of their
    512-frame batches (weighted by frames) and each applies the same update, so their
    weights stay identical; the driver mirrors rank 0's weights for evaluation and
    checkpoints.
    """
    return a3c_cartpole().derive(
        "ppo-cartpole-dd", learner_builder=ppo_learner,
        lr=3e-3, entropy_coef=0.0, normalize_advantage=True, frames_per_batch=1024,
        grad_communication="synchronous", decentralized=True,
    )  # fmt: skip
