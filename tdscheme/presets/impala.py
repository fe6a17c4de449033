"""IMPALA and APPO presets: the asynchronous actor-learner with V-trace.

Both train on first-ready batches through the
:class:`~tdscheme.scheme.async_loop.AsyncLoop` (``async_learner=True``): the
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
    >>> type(learner.loss_module).__name__, type(learner.value_estimator.estimator).__name__
    ('A2CLoss', 'VTrace')
    >>> appo = appo_cartpole()
    >>> type(appo.learner_factory()(**appo.policy_factory()()).loss_module).__name__
    'ClipPPOLoss'
"""

from __future__ import annotations

from tdscheme.presets.a2c import a2c_cartpole
from tdscheme.presets.ppo import ppo_learner
from tdscheme.presets.preset import Preset

__all__ = ["appo_cartpole", "impala_cartpole"]


def impala_cartpole() -> Preset:
    """IMPALA on CartPole-v1: a2c-cartpole's envs and loss, first-ready batches, V-trace.

    The learner takes each worker's 16 x 32-step batch as it comes; each worker
    collects up to 2 batches ahead of it, and weights are pushed after every update,
    so a batch is typically 1-2 updates old. Stops at the first evaluation whose mean
    return over 10 episodes reaches 475.
    """
    return a2c_cartpole().derive(
        "impala-cartpole",
        advantage="vtrace", anneal_frames=400_000, lr_end_factor=0.1,
        async_learner=True, total_frames=400_000,
    )  # fmt: skip


def appo_cartpole() -> Preset:
    """APPO on CartPole-v1: IMPALA's workers and queue, PPO's clipped loss on V-trace.

    Each 1024-frame batch (16 envs x 64 steps) gets 4 epochs of 256-frame minibatches.
    """
    return impala_cartpole().derive(
        "appo-cartpole", learner_builder=ppo_learner,
        num_epochs=4, minibatch_size=256, entropy_coef=0.0, normalize_advantage=True,
        anneal_frames=200_000, frames_per_batch=1024, total_frames=200_000,
        eval_every_frames=16_384,
    )  # fmt: skip
