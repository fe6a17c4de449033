"""``build_gradient_coordinator``: the one call a Scheme makes when ``num_grad_workers > 0``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tdscheme.gradient_workers.asynchronous import AsynchronousCoordinator
from tdscheme.gradient_workers.config import GradientWorkersConfig, GradientWorkerSpec
from tdscheme.gradient_workers.coordinator import GradientCoordinator
from tdscheme.gradient_workers.decentralized import DecentralizedCoordinator
from tdscheme.gradient_workers.synchronous import SynchronousCoordinator
from tdscheme.learner import Learner

__all__ = ["build_gradient_coordinator"]

_COORDINATORS: dict[str, type[GradientCoordinator]] = {
    "synchronous": SynchronousCoordinator,
    "asynchronous": AsynchronousCoordinator,
    "decentralized": DecentralizedCoordinator,
}


def build_gradient_coordinator(
    config: GradientWorkersConfig,
    *,
    env_factory: Callable[[], Any] | Sequence[Callable[[], Any]],
    policy_factory: Callable[[], Any],
    learner_factory: Callable[..., Learner],
    learner: Learner,
    ray_init_config: Mapping[str, Any] | None = None,
) -> GradientCoordinator:
    """Starts ``config.num_grad_workers`` gradient workers and returns the coordinator of its mode.

    The factories are the Scheme's own; each worker calls them in its process
    (``learner_factory(**policy_factory())``), so they must pickle (module-level
    functions or ``functools.partial`` of them travel best).

    Args:
        config: number of workers, communication, decentralization, batch sizes, ...
        env_factory: builds one torchrl env; or one factory per gradient worker.
        policy_factory: builds the modules, e.g. ``{"actor": ..., "critic": ...}``.
        learner_factory: ``learner_factory(**modules) -> Learner``.
        learner: the driver's Learner, built from the same factories; the workers
            start from its weights (and, decentralized, its optimizer state).
        ray_init_config: ``ray.init`` arguments if Ray is not running yet.

    Returns:
        A :class:`SynchronousCoordinator`, :class:`AsynchronousCoordinator` or
        :class:`DecentralizedCoordinator`: ``step()`` runs one training step and
        returns its metrics; ``state_dict()``/``load_state_dict()``, ``stats()``,
        ``shutdown()``; a context manager.

    Raises:
        ValueError: ``env_factory`` is a list whose length is not ``num_grad_workers``.
        TypeError: a factory is not callable, or ``config`` is not a
            :class:`GradientWorkersConfig`.

    Example:
        >>> from functools import partial
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets import get_preset
        >>> preset = get_preset("ppo-cartpole")
        >>> modules, learner_factory = preset.policy_factory(), preset.learner_factory()
        >>> config = GradientWorkersConfig(num_grad_workers=2, frames_per_batch=64)
        >>> with build_gradient_coordinator(  # doctest: +SKIP
        ...     config, env_factory=partial(make_env, "CartPole-v1"), policy_factory=modules,
        ...     learner_factory=learner_factory,
        ...     learner=learner_factory(**modules())) as coordinator:
        ...     metrics = coordinator.step()
    """
    if not isinstance(config, GradientWorkersConfig):
        raise TypeError(f"config must be a GradientWorkersConfig, got {type(config).__name__}")
    for name, factory in (("policy_factory", policy_factory), ("learner_factory", learner_factory)):
        if not callable(factory):
            raise TypeError(f"{name} must be callable, got {factory!r}")
    env_factories = _per_worker_env_factories(env_factory, config.num_grad_workers)
    specs = [
        GradientWorkerSpec(
            env_factory=env_fn,
            policy_factory=policy_factory,
            learner_factory=learner_factory,
            num_collectors=config.num_collectors,
            frames_per_batch=config.frames_per_batch,
            compress=config.compress,
            collector_kwargs=dict(config.collector_kwargs or {}),
            collector_class=config.collector_class,
        )
        for env_fn in env_factories
    ]
    coordinator_class = _COORDINATORS[config.mode]
    return coordinator_class(config, specs, learner, ray_init_config=ray_init_config)


def _per_worker_env_factories(env_factory: Any, num_workers: int) -> list[Callable[[], Any]]:
    if isinstance(env_factory, Sequence) and not isinstance(env_factory, str):
        factories = list(env_factory)
        if len(factories) != num_workers:
            raise ValueError(
                f"env_factory is a list of {len(factories)} factories; give one factory or "
                f"num_grad_workers={num_workers} of them"
            )
    else:
        factories = [env_factory] * num_workers
    for i, factory in enumerate(factories):
        if not callable(factory):
            raise TypeError(
                f"env_factory[{i}] must be callable (returning an env), got {factory!r}"
            )
    return factories
