"""The one place that knows where torchrl keeps the names that move between releases.

torchrl 0.14 renamed ``SyncDataCollector`` to ``torchrl.collectors.Collector`` and
``MultiSyncDataCollector`` to ``MultiSyncCollector``. Everything else in tdscheme
asks this module for the classes it needs.
"""

from __future__ import annotations

import inspect
from typing import Any

import torchrl.collectors as _collectors


def _first(*names: str) -> Any:
    for name in names:
        cls = getattr(_collectors, name, None)
        if cls is not None:
            return cls
    raise ImportError(f"torchrl.collectors has none of {names}; is torchrl installed?")


#: torchrl's single-process collector (``Collector``, formerly ``SyncDataCollector``).
Collector = _first("Collector", "SyncDataCollector")
#: torchrl's multiprocess synchronous collector.
MultiSyncCollector = _first("MultiSyncCollector", "MultiSyncDataCollector")
#: torchrl's multiprocess asynchronous collector.
MultiAsyncCollector = _first("MultiAsyncCollector", "MultiaSyncDataCollector")
#: The base class every torchrl collector derives from.
BaseCollector = _first("BaseCollector", "DataCollectorBase")

_BY_NAME = {"single": Collector, "sync": MultiSyncCollector, "async": MultiAsyncCollector}


def resolve_collector_class(collector_class: Any) -> type:
    """Turns torchrl's ``collector_class`` argument into a collector class.

    Args:
        collector_class: ``None`` (torchrl's ``Collector``), one of ``"single"``,
            ``"sync"``, ``"async"`` (as torchrl's RayCollector accepts), or a
            subclass of torchrl's ``BaseCollector``.

    Returns:
        The collector class.

    Raises:
        ValueError: an unknown string.
        TypeError: anything else that is not a collector class.

    Example:
        >>> resolve_collector_class("single") is Collector
        True
    """
    if collector_class is None:
        return Collector
    if isinstance(collector_class, str):
        if collector_class not in _BY_NAME:
            raise ValueError(
                f"collector_class={collector_class!r} is not one of {sorted(_BY_NAME)} "
                f"or a torchrl BaseCollector subclass"
            )
        return _BY_NAME[collector_class]
    if isinstance(collector_class, type) and issubclass(collector_class, BaseCollector):
        return collector_class
    raise TypeError(
        f"collector_class must be a torchrl BaseCollector subclass or one of "
        f"{sorted(_BY_NAME)}, got {collector_class!r}"
    )


def is_multi_collector(collector_class: type) -> bool:
    """Whether ``collector_class`` runs several env processes (takes a list of env fns)."""
    return issubclass(collector_class, (MultiSyncCollector, MultiAsyncCollector))


def default_collector_kwargs(collector_class: type) -> dict[str, Any]:
    """Keyword arguments tdscheme gives every torchrl collector it builds, before the user's own.

    torchrl 0.14 collectors take ``auto_register_policy_transforms``: ``None``
    (their default) leaves the env as it is but emits a ``FutureWarning`` for any
    ``nn.Module`` policy whose env lacks an ``InitTracker`` (0.15 will append one,
    adding ``"is_init"`` to every frame). tdscheme passes ``False``: the env stays
    as the user built it, so collected data are what they were and no warning is
    emitted. A user's ``collector_kwargs`` entry overrides it. Collector classes
    without the argument (older torchrl, custom collectors) get nothing.

    Args:
        collector_class: the torchrl collector class about to be built.

    Returns:
        A fresh dict.

    Example:
        >>> default_collector_kwargs(Collector)
        {'auto_register_policy_transforms': False}
    """
    if takes_argument(collector_class, "auto_register_policy_transforms"):
        return {"auto_register_policy_transforms": False}
    return {}


def takes_argument(collector_class: type, name: str) -> bool:
    """Whether ``collector_class``'s constructor has an argument ``name``.

    Example:
        >>> takes_argument(Collector, "worker_idx"), takes_argument(Collector, "nope")
        (True, False)
    """
    try:
        parameters = inspect.signature(collector_class.__init__).parameters
    except (TypeError, ValueError):  # no introspectable signature
        return False
    return name in parameters


def default_exploration_type() -> Any:
    """torchrl collectors' default ``exploration_type`` (``ExplorationType.RANDOM``)."""
    try:
        from torchrl.collectors._constants import DEFAULT_EXPLORATION_TYPE
    except ImportError:  # older torchrl kept it elsewhere
        from torchrl.envs.utils import ExplorationType

        return ExplorationType.RANDOM
    return DEFAULT_EXPLORATION_TYPE


def shared_memory_weight_scheme() -> Any:
    """A new torchrl ``SharedMemWeightSyncScheme``: how a multiprocess collector sends weights
    to its env processes."""
    from torchrl.weight_update import SharedMemWeightSyncScheme

    return SharedMemWeightSyncScheme()


def ray_weight_scheme_class() -> type:
    """torchrl's ``RayWeightSyncScheme`` (weights through Ray's object store)."""
    from torchrl.weight_update import RayWeightSyncScheme

    return RayWeightSyncScheme


def env_creator_class() -> type:
    """torchrl's ``EnvCreator`` (an env factory that builds one env up front to learn its specs)."""
    from torchrl.envs import EnvCreator

    return EnvCreator


def env_output_keys(collector: Any) -> set[Any] | None:
    """The keys a torchrl single-process collector's env writes (its ``_env_output_keys``).

    ``None`` when the collector does not say (a multiprocess collector, another release).
    """
    keys = getattr(collector, "_env_output_keys", None)
    return set(keys) if keys else None


def trajectory_pool(first_id: int) -> Any:
    """torchrl's trajectory-id pool (a single-process ``Collector``'s ``traj_pool``) from ``first_id``.

    A rebuilt worker's collector counts trajectories on from where its previous
    actor stopped, so that its ids never repeat one of the earlier ones.

    Example:
        >>> trajectory_pool(7).get_traj_and_increment(2).tolist()
        [7, 8]
    """
    import torch
    from torchrl.collectors.utils import _TrajectoryPool

    pool = _TrajectoryPool()
    pool.load_state_dict({"traj_id": torch.tensor(first_id, dtype=torch.int)})
    return pool


def next_trajectory_id(collector: Any) -> int | None:
    """The id a single-process torchrl collector gives its next trajectory (``None``: unknown)."""
    pool = getattr(collector, "_traj_pool_val", None)
    if pool is None or not hasattr(pool, "state_dict"):
        return None
    return int(pool.state_dict()["traj_id"])


def takes_trajectory_pool(collector_class: type) -> bool:
    """Whether ``collector_class`` takes torchrl's ``traj_pool`` (its single-process ``Collector``)."""
    return isinstance(collector_class, type) and issubclass(collector_class, Collector)
