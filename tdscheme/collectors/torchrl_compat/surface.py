"""torchrl RayCollector's attributes, read from a tdscheme RayCollector's own state.

Code written for torchrl's ``RayCollector`` builds it with torchrl's keywords (the
constructor here lists each one, so that type checkers and IDEs see them), reads ``remote_collectors``, ``num_workers``,
``collector_class``, ``collector_kwargs``, the device lists and so on, and calls
``stop_remote_collectors()``, ``add_collectors(...)`` (torchrl's argument order) and
``async_shutdown()``; torchrl's ``BaseCollector.__len__`` reads
``requested_frames_per_batch``. :class:`TorchrlSurface` gives
:class:`~tdscheme.collectors.RayCollector` those names; each is derived from the
collector's config and its workers' specs, so nothing is stored twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tensordict import TensorDict, TensorDictBase

from tdscheme.collectors.settings.config import RayCollectorConfig
from tdscheme.collectors.settings.specs import for_added_workers
from tdscheme.stragglers import PreemptionConfig

if TYPE_CHECKING:
    from tdscheme.collectors.driver.pool import WorkerPool

__all__ = ["TorchrlSurface"]


class TorchrlSurface:
    """torchrl RayCollector's attribute names on a tdscheme RayCollector (a mixin).

    The host class provides ``config`` (its :class:`RayCollectorConfig`), ``_pool``
    (its :class:`WorkerPool`), ``shutdown()``, ``_check_open()`` and
    ``_add_workers(config)`` (starts the workers of a config, returns their ids). Every attribute is read-only: the
    settings they show were applied when the workers were built.
    """

    config: RayCollectorConfig
    _pool: WorkerPool

    if TYPE_CHECKING:

        def shutdown(self, timeout: float | None = None, **kwargs: Any) -> None: ...

        def _check_open(self) -> None: ...

        def _add_workers(self, config: RayCollectorConfig) -> list[int]: ...

        def _setup(self, config: RayCollectorConfig) -> None: ...

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        policy_factory: Callable[[], Any] | Sequence[Callable[[], Any]] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Any = None,
        storing_device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        max_frames_per_traj: int = -1,
        init_random_frames: int = -1,
        reset_at_each_iter: bool = False,
        postproc: Callable | None = None,
        split_trajs: bool = False,
        exploration_type: Any = None,
        collector_class: Any = None,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_collectors: int | None = None,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        max_policy_lag: int | None = None,
        preemption: Mapping[str, float] | PreemptionConfig | None = None,
        compress: bool | Sequence[Any] = False,
        dedup_obs: bool | str = "auto",
        prefetch_batches: int | None = None,
        max_restarts: int = 3,
        seed: int | None = None,
        batch_timeout_s: float = 600.0,
        actor_start_timeout_s: float = 120.0,
        placement: str = "check",
        worker_stall_timeout_s: float | None = 120.0,
        min_workers: int | None = None,
        replay_buffer: Any = None,
        drop_nonfinite_frames: bool = False,
        replay_priority_fn: Callable[[Any, Any], Any] | None = None,
        replay_n_step: Any = None,
        trajs_per_batch: int | None = None,
        trust_policy: bool | None = None,
        use_env_creator: bool = False,
        no_cuda_sync: bool | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[Any], None] | None = None,
        weight_updater: Any = None,
        weight_sync_schemes: Mapping[str, Any] | None = None,
        weight_recv_schemes: Mapping[str, Any] | None = None,
    ) -> None:
        """torchrl's ``RayCollector(create_env_fn, policy=None, *, ...)``, every keyword written out.

        Each argument is a field of :class:`~tdscheme.collectors.RayCollectorConfig`, where
        its meaning, default and checks are declared once (a test holds this signature
        and the config's fields together); the config is built and checked, then the
        collector from it.
        """
        settings = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self._setup(RayCollectorConfig(**settings))

    @property
    def remote_collectors(self) -> list[Any]:
        """The worker actors (tdscheme ``CollectorWorker`` actors, not torchrl collector actors).

        Empty once the collector is shut down.
        """
        return [actor for actor in self._pool.actors() if actor is not None]

    def stop_remote_collectors(self) -> None:
        """Stops the workers; in tdscheme this is :meth:`shutdown`.

        A collector cannot collect without its workers in torchrl either; tdscheme shuts
        the whole collector down so that a later call raises "is shut down", and releases
        its Ray lease here rather than at a later ``shutdown()`` (which does nothing then).
        """
        self.shutdown()

    async def async_shutdown(self, shutdown_ray: bool = False, timeout: float = 30.0) -> None:
        """:meth:`shutdown` without blocking the event loop (it runs in a thread)."""
        await asyncio.to_thread(self.shutdown, timeout, shutdown_ray=shutdown_ray)

    def add_collectors(
        self,
        create_env_fn: Callable | Sequence[Callable],
        num_envs: int | None = None,
        policy: Any = None,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Grows the pool with one worker per env factory (torchrl's argument order).

        New workers get the current weights and policy version. With
        ``sync=True`` each worker keeps collecting ``frames_per_batch /
        num_collectors`` frames (as computed at construction), so the stacked
        batch grows with the pool.

        Returns:
            The new workers' ids.
        """
        self._check_open()
        extra = for_added_workers(
            self.config,
            create_env_fn,
            num_envs=num_envs,
            policy=policy,
            collector_kwargs=collector_kwargs,
            remote_configs=remote_configs,
        )
        ids = self._add_workers(extra)
        self.config.num_collectors = len(self._pool)
        return ids

    @property
    def num_workers(self) -> int:
        """Number of workers (torchrl's name for ``num_collectors``)."""
        return len(self._pool)

    @property
    def collector_class(self) -> type:
        """The torchrl collector class every worker wraps."""
        return self.config.collector_class

    @property
    def collector_kwargs(self) -> list[dict[str, Any]]:
        """The keyword arguments each worker's collector was built with, one dict per worker."""
        return [dict(spec.collector_kwargs) for spec in self._pool.specs()]

    @property
    def requested_frames_per_batch(self) -> int:
        """Frames per yielded batch, as asked for (torchrl's ``BaseCollector.__len__`` reads it:
        ``len(collector)`` is the number of batches up to ``total_frames``, and ``list()``
        calls ``len``)."""
        return self.config.frames_per_batch

    @property
    def init_random_frames(self) -> int:
        """Frames collected with a random policy before the policy runs (torchrl's: >= 0).

        torchrl's trainers read it: they start optimizing only once this many frames
        were collected.
        """
        return max(0, int(self.config.init_random_frames))

    @property
    def update_after_each_batch(self) -> bool:
        """Whether weights are pushed after each batch (see the class docstring)."""
        return self.config.update_after_each_batch

    @property
    def max_weight_update_interval(self) -> int:
        """Batches a worker may produce before it is sent weights (-1: never forced)."""
        return self.config.max_weight_update_interval

    @property
    def trust_policy(self) -> bool | None:
        """torchrl's ``trust_policy``, as passed to every worker's collector."""
        return self.config.trust_policy

    @property
    def device(self) -> list[Any]:
        """Each worker's ``device`` argument."""
        return self._per_worker("device")

    @property
    def storing_device(self) -> list[Any]:
        """Each worker's ``storing_device`` argument."""
        return self._per_worker("storing_device")

    @property
    def env_device(self) -> list[Any]:
        """Each worker's ``env_device`` argument."""
        return self._per_worker("env_device")

    @property
    def policy_device(self) -> list[Any]:
        """Each worker's ``policy_device`` argument."""
        return self._per_worker("policy_device")

    @property
    def no_cuda_sync(self) -> bool | None:
        """torchrl's ``no_cuda_sync``, as passed to every worker's collector."""
        return self.config.no_cuda_sync

    @property
    def policy_factory(self) -> list[Any]:
        """Each worker's ``policy_factory`` (``None`` where the policy is sent)."""
        return [spec.policy_factory for spec in self._pool.specs()]

    @property
    def policy_weights(self) -> TensorDictBase:
        """The driver policy's weights as a locked TensorDict (empty for a non-module policy).

        As torchrl's: a view of the policy's parameters, so it shows their current
        values; these are what ``update_policy_weights_()`` pushes by default.
        """
        module = self.config.policy_module()
        if module is None:
            return TensorDict(lock=True)
        return TensorDict.from_module(module).data.lock_()

    def local_policy(self) -> Any:
        """The driver-side policy (the one whose weights are pushed by default).

        torchrl documents this method as returning the local policy but its body
        reads an attribute it never sets (an ``AttributeError``); tdscheme keeps the
        documented meaning.
        """
        return self.config.policy

    def _per_worker(self, name: str) -> list[Any]:
        return [spec.collector_kwargs.get(name) for spec in self._pool.specs()]
