"""The Scheme's gradient-worker path: a coordinator built from a SchemeConfig, and its metrics.

When ``SchemeConfig.num_grad_workers > 0`` a :class:`~tdscheme.Scheme` does not
build a driver-side :class:`~tdscheme.RayCollector`; it builds a
:class:`~tdscheme.gradient_workers.GradientCoordinator` whose workers collect
with their own collectors and compute gradients with their own learner copies.
This module maps the Scheme's settings onto the coordinator's
(:func:`gradient_workers_config`) and the coordinator's step metrics onto the
Scheme's metric names (:func:`scheme_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tdscheme.gradient_workers import (
    GradientCoordinator,
    GradientWorkersConfig,
    build_gradient_coordinator,
)
from tdscheme.learner import Learner
from tdscheme.scheme_config import SchemeConfig

__all__ = ["build_coordinator", "gradient_workers_config", "scheme_metrics"]

#: Coordinator step metrics reported as ``grad_workers/<name>`` (besides every ``*_ms`` timer).
_COORDINATOR_KEYS = frozenset(
    {
        "frames_collected",
        "frames_dropped",
        "grads_applied",
        "grads_dropped",
        "updates",
        "preempted",
        "staleness_mean",
        "staleness_max",
        "staleness_dropped_max",
        "version",
        "restarts",
    }
)


def gradient_workers_config(config: SchemeConfig) -> GradientWorkersConfig:
    """The gradient workers' settings for a Scheme with ``config.num_grad_workers > 0``.

    ``frames_per_batch`` stays the frames of one learner update: each worker
    collects ``config.frames_per_gradient()`` frames per gradient.
    ``batch_timeout_s`` becomes the longest wait for a gradient, and ``seed`` the
    workers' base seed.

    Args:
        config: the Scheme's settings.

    Returns:
        The :class:`~tdscheme.gradient_workers.GradientWorkersConfig`.

    Raises:
        ValueError: ``config.num_grad_workers`` is 0.

    Example:
        >>> cfg = gradient_workers_config(SchemeConfig(
        ...     num_grad_workers=2, num_collectors=1, frames_per_batch=512, decentralized=True))
        >>> cfg.mode, cfg.frames_per_batch, cfg.num_collectors
        ('decentralized', 256, 1)
    """
    if config.num_grad_workers < 1:
        raise ValueError(
            f"num_grad_workers={config.num_grad_workers} is invalid here; accepted: an int >= 1"
        )
    return GradientWorkersConfig(
        num_grad_workers=config.num_grad_workers,
        communication=config.grad_communication,
        decentralized=config.decentralized,
        compress=config.grad_compress,
        worker_resources=config.grad_worker_resources,
        num_collectors=config.num_collectors,
        frames_per_batch=config.frames_per_gradient(),
        grads_per_step=config.grads_per_step,
        max_grad_staleness=config.max_grad_staleness,
        preemption=config.preemption,
        seed=config.seed,
        timeout_s=float(config.batch_timeout_s),
    )


def build_coordinator(
    config: SchemeConfig,
    *,
    env_factory: Callable[[], Any],
    policy_factory: Callable[[], Any],
    learner_factory: Callable[..., Learner],
    learner: Learner,
) -> GradientCoordinator:
    """Starts the gradient workers of ``config`` (joining or starting Ray).

    Args:
        config: the Scheme's settings, ``num_grad_workers > 0``.
        env_factory: builds one collector's env, in each worker.
        policy_factory: builds the modules, in each worker.
        learner_factory: ``learner_factory(**modules) -> Learner``, in each worker.
        learner: the driver's Learner; the workers start from its state.

    Returns:
        The coordinator of ``config.grad_mode``.
    """
    return build_gradient_coordinator(
        gradient_workers_config(config),
        env_factory=env_factory,
        policy_factory=policy_factory,
        learner_factory=learner_factory,
        learner=learner,
        ray_init_config=config.ray_init_config,
    )


def scheme_metrics(step: Mapping[str, float], *, mode: str, learner: Learner) -> dict[str, float]:
    """Renames one coordinator step's metrics to the Scheme's names.

    * ``episode_return_mean``, ``episodes`` -> ``train/episode_return``,
      ``train/episodes`` (only when an episode ended, as with collectors);
    * the counters (``grads_applied``, ``grads_dropped``, ``frames_dropped``,
      ``updates``, ``preempted``, ``staleness_*``, ``version``, ``restarts``) and
      every timer (``wait_ms``, ``apply_ms``, ``dispatch_ms``, ``step_ms``,
      ``collect_ms``, ...) -> ``grad_workers/<name>``;
    * the workers' loss metrics (``loss_objective``, ``grad_norm``, ...) ->
      ``learner/<name>``; ``learner/lr`` is the driver Learner's in centralized
      modes (the workers never step their schedulers there).

    The per-step ``frames`` is left out: the Scheme reports its running total.

    Args:
        step: what ``GradientCoordinator.step()`` returned.
        mode: the coordinator's mode.
        learner: the driver's Learner.

    Returns:
        Flat float metrics.

    Example:
        >>> from tdscheme.testing import cartpole_learner, cartpole_modules
        >>> learner = cartpole_learner(**cartpole_modules())
        >>> out = scheme_metrics({"frames": 64.0, "episodes": 2.0, "episode_return_mean": 20.0,
        ...                       "wait_ms": 3.0, "staleness_max": 1.0, "loss_objective": 0.5},
        ...                      mode="asynchronous", learner=learner)
        >>> sorted(out)  # doctest: +NORMALIZE_WHITESPACE
        ['grad_workers/staleness_max', 'grad_workers/wait_ms', 'learner/loss_objective',
         'learner/lr', 'train/episode_return', 'train/episodes']
    """
    out: dict[str, float] = {}
    for key, value in step.items():
        if key == "frames":
            continue
        if key == "episodes":
            if value > 0:
                out["train/episodes"] = float(value)
        elif key == "episode_return_mean":
            out["train/episode_return"] = float(value)
        elif key in _COORDINATOR_KEYS or key.endswith("_ms"):
            out[f"grad_workers/{key}"] = float(value)
        else:
            out[f"learner/{key}"] = float(value)
    if mode != "decentralized":
        out["learner/lr"] = float(learner.optimizer.param_groups[0]["lr"])
    return out
