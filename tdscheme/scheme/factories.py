"""What a Scheme is composed from: the user's factories, checked, and the loop they make.

:func:`check_factories` rejects a factory that cannot work before anything is
built; :func:`~tdscheme.learner.factories.build_learner` (re-exported) calls
the policy and learner factories on the driver; :func:`make_loop` picks the way
of training from the config and the factories (a ``storage_factory``: off-policy;
``num_grad_workers > 0``: gradient workers; ``async_learner``: IMPALA / APPO; else
collectors) and builds its :class:`~tdscheme.scheme.loop.TrainingLoop`.

Example:
    >>> check_factories(SchemeConfig(), env_factory=3, policy_factory=dict,
    ...                 learner_factory=dict)
    Traceback (most recent call last):
    ...
    TypeError: env_factory=3 is not callable; accepted: a function
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tdscheme.learner import Learner
from tdscheme.learner.factories import LearnerFactory, PolicyFactory, build_learner
from tdscheme.learner.group import LearnerGroup
from tdscheme.scheme.async_loop import AsyncLoop
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.grad_worker_loop import GradWorkerLoop
from tdscheme.scheme.loop import TrainingLoop
from tdscheme.scheme.off_policy_loop import OffPolicyLoop
from tdscheme.scheme.on_policy_loop import OnPolicyLoop

__all__ = [
    "EnvFactory",
    "LearnerFactory",
    "PolicyFactory",
    "StorageFactory",
    "build_learner",
    "check_factories",
    "make_loop",
]

EnvFactory = Callable[[], Any]
StorageFactory = Callable[[], Any]


def check_factories(
    config: SchemeConfig,
    *,
    env_factory: EnvFactory,
    policy_factory: PolicyFactory,
    learner_factory: LearnerFactory,
    eval_env_factory: EnvFactory | None = None,
    storage_factory: StorageFactory | None = None,
) -> None:
    """Raises unless every factory is callable and they fit ``config``.

    Raises:
        TypeError: a factory is not callable.
        ValueError: ``storage_factory`` is given with ``num_grad_workers > 0`` or
            ``async_learner``.
    """
    if storage_factory is not None and not callable(storage_factory):
        raise TypeError(
            f"storage_factory={storage_factory!r} is not callable; accepted: a function "
            f"returning a torchrl replay buffer, or None (on-policy)"
        )
    if storage_factory is not None and config.num_grad_workers > 0:
        raise ValueError(
            f"storage_factory={storage_factory!r} is invalid with num_grad_workers="
            f"{config.num_grad_workers}; accepted: num_grad_workers=0 with a "
            f"storage_factory (gradient workers train on-policy only), or "
            f"storage_factory=None"
        )
    if storage_factory is not None and config.num_learners and config.replay_location() != "ray":
        raise ValueError(
            f"buffer_location={config.buffer_location!r} is invalid with num_learners="
            f"{config.num_learners} and a storage_factory; accepted: buffer_location='ray' "
            f"(each learner rank samples the Ray-held buffer), or num_learners=0"
        )
    if storage_factory is not None and config.async_learner:
        raise ValueError(
            f"storage_factory={storage_factory!r} is invalid with async_learner=True; "
            f"accepted: storage_factory=None (IMPALA / APPO train on the batches as they "
            f"come; an off-policy run samples a replay buffer instead)"
        )
    for name, factory in (
        ("env_factory", env_factory),
        ("policy_factory", policy_factory),
        ("learner_factory", learner_factory),
    ):
        if not callable(factory):
            raise TypeError(f"{name}={factory!r} is not callable; accepted: a function")
    if eval_env_factory is not None and not callable(eval_env_factory):
        raise TypeError(
            f"eval_env_factory={eval_env_factory!r} is not callable; accepted: a function or None"
        )


def make_loop(
    config: SchemeConfig,
    *,
    env_factory: EnvFactory,
    policy_factory: PolicyFactory,
    learner_factory: LearnerFactory,
    learner: Learner,
    storage_factory: StorageFactory | None = None,
) -> TrainingLoop:
    """The training loop of this way of training, built (its actors started).

    Args:
        config: the Scheme's settings.
        env_factory: builds one collector's env.
        policy_factory: builds the modules (in each gradient worker).
        learner_factory: builds a Learner (in each gradient worker).
        learner: the driver's Learner.
        storage_factory: builds the replay buffer of an off-policy run, or ``None``.

    Returns:
        An :class:`OffPolicyLoop` with a ``storage_factory``, else a
        :class:`GradWorkerLoop` with ``num_grad_workers > 0``, else an
        :class:`AsyncLoop` with ``async_learner``, else a :class:`OnPolicyLoop`; all
        but the gradient workers' train a :class:`~tdscheme.learner.group.LearnerGroup`
        with ``num_learners > 0``.
    """
    if storage_factory is None and config.num_grad_workers > 0:
        return GradWorkerLoop(
            config,
            env_factory=env_factory,
            policy_factory=policy_factory,
            learner_factory=learner_factory,
            learner=learner,
        )
    if storage_factory is not None:
        loop_class = partial(OffPolicyLoop, storage_factory=storage_factory)
    else:
        loop_class = AsyncLoop if config.async_learner else OnPolicyLoop
    if not config.num_learners:
        return loop_class(config, env_factory=env_factory, learner=learner)
    group = LearnerGroup(
        learner, num_learners=config.num_learners, policy_factory=policy_factory,
        learner_factory=learner_factory, resources=config.learner_resources, seed=config.seed,
        timeout_s=config.batch_timeout_s, max_restarts=config.max_restarts,
        actor_start_timeout_s=config.actor_start_timeout_s, placement=config.placement,
        ray_init_config=config.ray_init_config,
    )  # fmt: skip
    try:
        return loop_class(config, env_factory=env_factory, learner=group)
    except BaseException:
        group.shutdown()
        raise
