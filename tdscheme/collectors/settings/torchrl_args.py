"""torchrl RayCollector arguments about each worker's own collector and weight path.

torchrl's ``RayCollector`` forwards some of its arguments to the torchrl collector each
remote worker builds, and sets up that collector's weight path. tdscheme does the same,
with torchrl's meaning:

* ``trust_policy``, ``no_cuda_sync``: passed to every worker's collector when set;
* ``pre_collect_hook``, ``post_collect_hook``: run by every worker's collector, before
  each rollout and on each batch it returns (so they must pickle); torchrl keeps them
  on the driver object too;
* ``use_env_creator``: env factories are wrapped in torchrl's ``EnvCreator``;
* a Ray ``InferenceServer`` as the ``policy`` (a policy service): each worker's collector
  gets its own client of it as its policy, and ``trust_policy`` defaults to ``True``;
  weights go to the server, not to the workers (see :func:`is_policy_service`);
* a ``policy_factory`` with a multiprocess collector class (``MultiSyncCollector``,
  ``MultiAsyncCollector``) and no ``policy``: that collector gets a
  ``SharedMemWeightSyncScheme`` for ``"policy"``, so that the weights a worker receives
  reach its env processes (without one, torchrl's collector has no way to load them).

An entry of the same name in ``collector_kwargs`` wins over each of these.

tdscheme sends weights to its workers itself (one ``ray.put`` per push, acknowledged by
each worker), so of torchrl's weight arguments it takes only what means the same:

* ``weight_sync_schemes``: ``None``, or ``{"policy": RayWeightSyncScheme()}`` (torchrl's
  default: weights through Ray's object store, which is what tdscheme does);
* ``weight_updater``, ``weight_recv_schemes``: ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from tdscheme.rollout.torchrl_names import (
    env_creator_class,
    is_multi_collector,
    ray_weight_scheme_class,
    shared_memory_weight_scheme,
)
from tdscheme.validation import invalid

__all__ = ["check_weight_args", "for_worker_collector", "is_policy_service", "with_env_creators"]

_PUSHES_ITSELF = (
    "tdscheme.RayCollector sends weights itself (update_policy_weights_: one ray.put, "
    "acknowledged by each worker)"
)


def check_weight_args(
    *, weight_updater: Any, weight_sync_schemes: Any, weight_recv_schemes: Any
) -> None:
    """Raises for torchrl weight arguments that tdscheme cannot honour.

    Raises:
        ValueError: ``weight_updater`` or ``weight_recv_schemes`` is set, or
            ``weight_sync_schemes`` is anything but ``None`` or
            ``{"policy": RayWeightSyncScheme()}``.

    Example:
        >>> check_weight_args(weight_updater=None, weight_sync_schemes=None,
        ...                   weight_recv_schemes=None)
        >>> check_weight_args(weight_updater=object, weight_sync_schemes=None,
        ...                   weight_recv_schemes=None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: weight_updater=<class 'object'> is invalid; accepted: None (tdscheme...
    """
    if weight_updater is not None:
        raise invalid(
            "weight_updater", weight_updater,
            f"None ({_PUSHES_ITSELF}; torchrl's legacy weight updaters do not apply)",
        )  # fmt: skip
    ray_scheme = ray_weight_scheme_class()
    if weight_sync_schemes is not None and not (
        isinstance(weight_sync_schemes, Mapping)
        and set(weight_sync_schemes) == {"policy"}
        and type(weight_sync_schemes["policy"]) is ray_scheme
    ):
        raise invalid(
            "weight_sync_schemes", weight_sync_schemes,
            f"None or {{'policy': RayWeightSyncScheme()}}, torchrl's default ({_PUSHES_ITSELF}, "
            f"through Ray's object store); to configure the weight path inside each worker's "
            f"collector, pass collector_kwargs={{'weight_sync_schemes': ...}}",
        )  # fmt: skip
    if weight_recv_schemes is not None:
        raise invalid(
            "weight_recv_schemes", weight_recv_schemes,
            "None (a tdscheme.RayCollector receives weights from update_policy_weights_ "
            "on the driver only)",
        )  # fmt: skip


def is_policy_service(policy: Any) -> bool:
    """Whether ``policy`` is a Ray-held torchrl policy service (``InferenceServer(..., "ray")``).

    torchrl's rule: its ``service_backend`` is ``"ray"`` and it hands out clients.

    Example:
        >>> is_policy_service(nn.Linear(1, 1))
        False
    """
    return getattr(policy, "service_backend", None) == "ray" and callable(
        getattr(policy, "client", None)
    )


def for_worker_collector(
    kwargs: Mapping[str, Any],
    *,
    collector_class: type,
    policy: Any,
    policy_factory: Callable[[], Any] | None,
    trust_policy: bool | None = None,
    no_cuda_sync: bool | None = None,
    pre_collect_hook: Callable[[], None] | None = None,
    post_collect_hook: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """One worker's collector arguments with torchrl's forwarded ones added (``kwargs`` wins).

    Args:
        kwargs: the worker's collector arguments so far.
        collector_class: the torchrl collector class the worker builds.
        policy, policy_factory: the worker's policy or policy factory.
        trust_policy, no_cuda_sync, pre_collect_hook, post_collect_hook: torchrl's
            RayCollector arguments of those names; ``None`` adds nothing.

    Returns:
        A new dict.

    Example:
        >>> from tdscheme.rollout.torchrl_names import Collector, MultiSyncCollector
        >>> for_worker_collector({"device": "cpu"}, collector_class=Collector, policy=None,
        ...                      policy_factory=None, trust_policy=True)
        {'device': 'cpu', 'trust_policy': True}
        >>> kw = for_worker_collector({}, collector_class=MultiSyncCollector, policy=None,
        ...                           policy_factory=dict)
        >>> type(kw["weight_sync_schemes"]["policy"]).__name__
        'SharedMemWeightSyncScheme'
    """
    out = dict(kwargs)
    forwarded = {
        "trust_policy": trust_policy,
        "no_cuda_sync": no_cuda_sync,
        "pre_collect_hook": pre_collect_hook,
        "post_collect_hook": post_collect_hook,
    }
    for name, value in forwarded.items():
        if value is not None:
            out.setdefault(name, value)
    if policy is None and policy_factory is not None and is_multi_collector(collector_class):
        out.setdefault("weight_sync_schemes", {"policy": shared_memory_weight_scheme()})
    return out


def with_env_creators(env_fns: Sequence[Any]) -> list[Any]:
    """``env_fns`` with each factory wrapped in torchrl's ``EnvCreator`` (``use_env_creator=True``).

    Envs (torchrl ``EnvBase`` instances) and factories that already are ``EnvCreator``\\ s
    are kept as they are.
    """
    creator = env_creator_class()
    return [fn if isinstance(fn, (nn.Module, creator)) else creator(fn) for fn in env_fns]
