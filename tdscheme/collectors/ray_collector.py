"""RayCollector: the driver-side iterable over batches from remote torchrl collectors."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tensordict import TensorDictBase
from torchrl.collectors.utils import split_trajectories

from tdscheme.collectors.config import RayCollectorConfig
from tdscheme.collectors.driver.background import BackgroundCollection, BackgroundCollectionMixin
from tdscheme.collectors.driver.flow import BatchFlow
from tdscheme.collectors.driver.pool import WorkerPool
from tdscheme.collectors.driver.stats import CollectorStats, StatsMixin
from tdscheme.collectors.driver.weights import AutoPushRule, WeightPushMixin
from tdscheme.collectors.torchrl_compat.learner_sync import LearnerWeightSyncMixin
from tdscheme.collectors.torchrl_compat.remote_calls import RemoteCallsMixin
from tdscheme.collectors.torchrl_compat.state import CollectorStateMixin
from tdscheme.collectors.torchrl_compat.surface import TorchrlSurface
from tdscheme.runtime import RayLease
from tdscheme.runtime.torchrl_names import BaseCollector
from tdscheme.transport import TensorDictCodec
from tdscheme.validation import check_frame_budget

logger = logging.getLogger(__name__)

#: The arguments that set a worker's Ray resources, as the user may have written them.
_RESOURCE_ARGUMENTS = (
    "num_collectors x remote_configs; Scheme: collector_resources; "
    "command: --num-collectors x --collector-resources"
)


class RayCollector(
    TorchrlSurface,
    LearnerWeightSyncMixin,
    RemoteCallsMixin,
    CollectorStateMixin,
    StatsMixin,
    WeightPushMixin,
    BackgroundCollectionMixin,
    BaseCollector,
):
    """Distributed torchrl collection on Ray; a drop-in for torchrl's ``RayCollector``.

    Each of ``num_collectors`` Ray actors wraps one torchrl collector
    (``collector_class``; by default :class:`~tdscheme.rollout.lean.LeanCollector`,
    torchrl's ``Collector`` with a leaner rollout and the same frames). Iterating yields
    TensorDict batches until ``total_frames`` frames were yielded (forever with
    -1), then shuts the workers down, as torchrl's RayCollector does.

    Ordering: ``sync=False`` yields each worker's batch of ``frames_per_batch``
    frames as soon as it is ready (first-ready); ``sync=True`` yields one batch
    stacked from all workers, ``[num_collectors, *worker_batch]``, each worker
    collecting ``frames_per_batch / num_collectors`` frames.

    Every frame carries ``("collector", "worker_id")`` and
    ``("collector", "policy_version")``: the version of the weights it was
    collected with. The version starts at 0 and increases by one at every
    weight push (explicit or automatic).

    Weight pushes: :meth:`update_policy_weights_` sends weights with one
    ``ray.put`` shared by all workers; each worker acknowledges the version as
    soon as the weights arrive (even mid-batch) and runs it from the next batch
    it starts (``stats()["worker_policy_versions"]``: acknowledged;
    ``stats()["worker_running_versions"]``: seen in batches). Automatic pushes, made when the
    consumer asks for the next batch (after it trained on the last one), send
    the driver policy's current weights:

    * ``update_after_each_batch=True``: with ``sync=True`` to every worker after
      each batch; with ``sync=False`` to the worker that produced the batch.
    * ``max_weight_update_interval=k >= 0``: to every worker that has produced
      more than ``k`` batches since it last received weights (explicit pushes
      reset the count). -1 never forces a push.

    With torchrl's trainers and ``learner_backend="ray"``, torchrl's learner publishes
    the weights straight to the workers, stamped with its model version, and driver
    pushes stop (:class:`~tdscheme.collectors.torchrl_compat.learner_sync.LearnerWeightSyncMixin`).

    Args:
        create_env_fn: an env factory (or a list with one per collector).
        policy: the policy (a ``TensorDictModule`` or ``nn.Module``); its weights
            are pushed by default. ``None`` with ``policy_factory`` or for a random policy.
            A Ray ``InferenceServer``: each worker calls it through its own client, and
            weight pushes update the server.
        policy_factory: builds the policy inside each worker (one or one per collector).
        frames_per_batch: frames per yielded batch.
        total_frames: stop after this many frames (-1: never).
        device, storing_device, env_device, policy_device: passed to each worker's
            collector (one value or one per collector).
        max_frames_per_traj, init_random_frames, reset_at_each_iter, exploration_type:
            as torchrl's collectors (``init_random_frames`` is split over collectors,
            each share rounded up to whole batches as torchrl's collectors do).
        postproc: applied to each yielded batch on the driver.
        split_trajs: split yielded batches into trajectories on the driver.
        collector_class: ``None`` (default: tdscheme's ``LeanCollector``, a torchrl
            ``Collector`` subclass that yields the same frames faster), ``Collector``,
            ``MultiSyncCollector``, ... or ``"single"``, ``"sync"``, ``"async"``; a
            class given here is used exactly.
        collector_kwargs: extra collector arguments (one dict or one per collector);
            a value given here overrides tdscheme's default
            ``auto_register_policy_transforms=False`` (the env is left as built).
        num_workers_per_collector: env copies per collector.
        sync: stacked (``True``) or first-ready (``False``) order.
        ray_init_config: any ``ray.init`` arguments, used only if Ray is not running
            in this process. As ``ray.init``: ``{"address": ...}`` joins that cluster;
            with no address, the cluster of ``RAY_ADDRESS`` or of a ``ray start`` on
            this machine is joined, else a local Ray is started (no dashboard, one CPU
            per core); ``"local"`` always starts one. tdscheme never stops a Ray it
            did not start (see :class:`~tdscheme.runtime.RayLease`).
        remote_configs: Ray actor options (one dict or one per collector);
            default as torchrl's: ``{"num_cpus": 1}``, plus ``"num_gpus": 0.2`` when
            CUDA is available (see :func:`~tdscheme.collectors.config.default_remote_config`).
        num_collectors: number of workers (default: ``len(create_env_fn)`` or 1).
        update_after_each_batch, max_weight_update_interval: automatic pushes, above.
        max_policy_lag: drop (and count in ``frames_dropped``) any batch collected
            with weights more than this many versions old when it is yielded; 0 is
            strictly on-policy. ``None``: no bound.
        preemption: ``{"fraction_workers": a, "fraction_samples": b}`` (sync only):
            once ``a`` of the workers finished and ``b`` of the frames are in, the
            others stop at their next env step; their partial rollouts are padded
            and ``("collector", "mask")`` marks the valid frames.
        compress: lz4-compress every leaf (``True``) or the listed keys on the wire.
        prefetch_batches: requests each worker keeps in flight while the consumer
            holds a batch, so env stepping overlaps training (bounded, so the
            object store cannot fill up). Default 1, or 0 when ``max_policy_lag=0``
            or ``update_after_each_batch`` asks for on-policy data.
        max_restarts: times a dead worker is rebuilt before a ``WorkerError``.
        seed: seeds worker ``i`` distinctly and reproducibly (also see :meth:`set_seed`).
        batch_timeout_s: raise ``TimeoutError`` if no batch arrives for this long
            while every worker still answers pings.
        actor_start_timeout_s: a worker Ray has not placed (or whose constructor
            has not returned) this long after it was asked for is a
            :class:`~tdscheme.runtime.placement.PlacementError`; requests the
            cluster could never satisfy (``num_collectors`` x ``remote_configs`` past
            its total resources) are one at once (:mod:`tdscheme.runtime.placement`).
        worker_stall_timeout_s: a worker that makes no progress (env steps) for
            this long while it has a request is declared hung, killed and rebuilt
            like a dead one (its batch counted as lost); ``None``: no check. A new
            or rebuilt worker that has not replied yet may take ``actor_start_timeout_s``
            when that is longer (it may still be placed and built).
        min_workers: elastic collection (RLlib's ``ignore_env_runner_failures``):
            a worker that used up ``max_restarts`` is retired (logged and counted)
            and the others go on, as long as ``min_workers`` remain; ``None``:
            such a worker stops the run with a ``WorkerError``.
        replay_buffer: a Ray-held torchrl buffer (``RayReplayBuffer(...)`` or
            ``ReplayBuffer(..., service_backend="ray")``): each worker writes its
            stamped frames into it through its own client and iteration yields
            ``None`` per batch, as in torchrl; :meth:`start` collects in the
            background. Batches keep torchrl's layout (``[*env_batch, time]``).
            Never a frame past ``total_frames``: each request gets what is left
            as its budget and is cut to the rows that fit (frames past it are
            discarded and counted in ``stats()["frames_discarded"]``; with a
            batched env a row is one env's steps of the batch, so ``total_frames``
            may end up to one row short). ``max_policy_lag`` is applied by each worker when it
            writes.
        trajs_per_batch: each worker's collector assembles whole trajectories
            (torchrl's argument); with a replay buffer each is written flat
            (``SliceSampler``-ready) and never cut: a trajectory that does not
            fit in the frame budget is discarded, and collection ends there.
        trust_policy, use_env_creator, no_cuda_sync, pre_collect_hook, post_collect_hook,
        weight_updater, weight_sync_schemes, weight_recv_schemes: torchrl's arguments
            about each worker's collector and its weight path, with torchrl's meaning
            where tdscheme can keep it (see :mod:`tdscheme.collectors.torchrl_compat.args`).

    torchrl's attribute names (``remote_collectors``, ``num_workers``,
    ``collector_kwargs``, the device lists, ``stop_remote_collectors()``, ...) come from
    :class:`~tdscheme.collectors.torchrl_compat.surface.TorchrlSurface`; ``map_fn`` and
    ``get_distant_attr`` (on each worker's torchrl collector) from
    :mod:`tdscheme.collectors.torchrl_compat.remote_calls`; ``state_dict`` / ``load_state_dict``
    (torchrl's per-worker list) from :mod:`tdscheme.collectors.torchrl_compat.state`.

    Raises:
        ValueError, TypeError: bad arguments, named with the accepted values.

    Example:
        >>> # Needs Ray; see examples/collect_cartpole.py
        >>> from tdscheme import RayCollector  # doctest: +SKIP
        >>> from tdscheme.testing import make_env, mlp_policy  # doctest: +SKIP
        >>> with RayCollector(make_env, mlp_policy(4, 2), frames_per_batch=1000,
        ...                   total_frames=10_000, num_collectors=2) as collector:  # doctest: +SKIP
        ...     for batch in collector:
        ...         print(batch["collector", "worker_id"][0].item(), batch.numel())
    """

    def __init__(
        self,
        create_env_fn: Callable | Sequence[Callable],
        policy: Callable | None = None,
        *,
        policy_factory: Callable | Sequence[Callable] | None = None,
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
        preemption: Mapping[str, float] | None = None,
        compress: bool | Sequence[Any] = False,
        prefetch_batches: int | None = None,
        max_restarts: int = 3,
        seed: int | None = None,
        batch_timeout_s: float = 600.0,
        actor_start_timeout_s: float = 120.0,
        worker_stall_timeout_s: float | None = 120.0,
        min_workers: int | None = None,
        replay_buffer: Any = None,
        trajs_per_batch: int | None = None,
        trust_policy: bool | None = None,
        use_env_creator: bool = False,
        no_cuda_sync: bool | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        weight_updater: Any = None,
        weight_sync_schemes: Mapping[str, Any] | None = None,
        weight_recv_schemes: Mapping[str, Any] | None = None,
    ) -> None:
        extra = {} if exploration_type is None else {"exploration_type": exploration_type}
        config = RayCollectorConfig(
            create_env_fn, policy, policy_factory=policy_factory,
            frames_per_batch=frames_per_batch, total_frames=total_frames, device=device,
            storing_device=storing_device, env_device=env_device, policy_device=policy_device,
            max_frames_per_traj=max_frames_per_traj, init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter, postproc=postproc, split_trajs=split_trajs,
            collector_class=collector_class, collector_kwargs=collector_kwargs,
            num_workers_per_collector=num_workers_per_collector, sync=sync,
            ray_init_config=ray_init_config, remote_configs=remote_configs,
            num_collectors=num_collectors, update_after_each_batch=update_after_each_batch,
            max_weight_update_interval=max_weight_update_interval,
            max_policy_lag=max_policy_lag, preemption=preemption, compress=compress,
            prefetch_batches=prefetch_batches, max_restarts=max_restarts, seed=seed,
            batch_timeout_s=batch_timeout_s, actor_start_timeout_s=actor_start_timeout_s,
            worker_stall_timeout_s=worker_stall_timeout_s, min_workers=min_workers,
            replay_buffer=replay_buffer,
            trajs_per_batch=trajs_per_batch, trust_policy=trust_policy,
            use_env_creator=use_env_creator, no_cuda_sync=no_cuda_sync,
            pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook,
            weight_updater=weight_updater, weight_sync_schemes=weight_sync_schemes,
            weight_recv_schemes=weight_recv_schemes, **extra,
        )  # fmt: skip
        self._setup(config)

    @classmethod
    def from_config(cls, config: RayCollectorConfig) -> RayCollector:
        """Builds a collector from a :class:`RayCollectorConfig`."""
        collector = cls.__new__(cls)
        collector._setup(config)
        return collector

    def _setup(self, config: RayCollectorConfig) -> None:
        super().__init__(
            pre_collect_hook=config.pre_collect_hook, post_collect_hook=config.post_collect_hook
        )
        self.config = config
        self.policy = config.policy
        self.frames_per_batch = config.frames_per_batch
        self.total_frames = config.total_frames
        self.postproc = config.postproc
        self.split_trajs = config.split_trajs
        self.replay_buffer = config.replay_buffer
        self._codec = TensorDictCodec(config.compress)
        self._stats = CollectorStats()
        self._auto_pushes = AutoPushRule(
            update_after_each_batch=config.update_after_each_batch,
            max_weight_update_interval=config.max_weight_update_interval,
        )
        self._iterator = None
        self._closed = False
        self._lease = RayLease.acquire(config.ray_init_config)
        self._pool = WorkerPool(
            max_restarts=config.max_restarts, seed=config.seed, min_workers=config.min_workers
        )
        self._flow = BatchFlow(self._pool, config, self._stats, self._codec, self._auto_push)
        self._background = BackgroundCollection(self._batches, self._flow.request_stop)
        try:
            self._add_workers(config)
        except BaseException:
            self.shutdown()
            raise

    def _add_workers(self, config: RayCollectorConfig) -> list[int]:
        """Starts one worker per spec of ``config``, once Ray can place them; returns their ids."""
        remotes = config.remote_config_list()
        self._pool.check_fits(remotes, argument=_RESOURCE_ARGUMENTS)
        ids = []
        for spec, remote in zip(config.worker_specs(), remotes, strict=True):
            ids.append(self._pool.add(spec, remote))
            self._auto_pushes.add_workers(1)
        self._pool.wait_started(
            ids, timeout_s=self.config.actor_start_timeout_s, argument=_RESOURCE_ARGUMENTS
        )
        return ids

    # -- the public surface ----------------------------------------------------------

    @property
    def num_collectors(self) -> int:
        """Number of workers."""
        return len(self._pool)

    @property
    def workers(self) -> list[Any]:
        """The Ray actor handles of the workers (for custom calls; do not kill them)."""
        return self._pool.actors()

    @property
    def policy_version(self) -> int:
        """Version of the newest weights pushed (0 before any push)."""
        return self._pool.version

    @property
    def collected_frames(self) -> int:
        """Frames yielded so far."""
        return self._stats.frames

    def set_total_frames(self, total_frames: int) -> None:
        """Changes the frame budget (the constructor's ``total_frames``) of this collector.

        It counts every frame yielded (or written) since construction, or since the
        state loaded with :meth:`load_state_dict`; it may be changed while
        iterating: the batch that would pass it is cut to fit, as at construction.
        A replay-buffer request already sent keeps the budget it was sent with.

        Args:
            total_frames: an int >= 0, or -1 for no limit.

        Raises:
            ValueError: ``total_frames`` is neither.
        """
        check_frame_budget("total_frames", total_frames)
        self.config.total_frames = self.total_frames = total_frames
        self._flow.budget.reopen()

    @property
    def frames_left(self) -> int | None:
        """Frames that may still be yielded (or written); ``None`` without ``total_frames``.

        0 once the budget is spent, also when the last batch was cut short of it
        (with a batched env the cut keeps whole steps, so up to one step's frames
        less than ``total_frames`` may be yielded, never more).
        """
        return self._flow.budget.left()

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches (see the class docstring) until ``total_frames``.

        With a replay buffer each batch is ``None`` (its frames are in the buffer).
        Iterating to the end shuts the workers down, as torchrl's does, except in
        background collection (:meth:`start`), which leaves them for the owner.
        A new iteration supersedes one still open: the old iterator ends at its
        next step and its requests in flight are counted as discarded.

        Raises:
            RuntimeError: background collection (:meth:`start`) is running.
        """
        self._check_not_in_background()
        iteration = self._flow.iteration + 1  # the number the flow gives the one started below
        yield from self._batches()
        if not self._flow.stopping and self._flow.iteration == iteration:
            self.shutdown()

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        # checked here, at ``iter()``: torchrl's ``__iter__`` shuts down on any error inside
        self._check_not_in_background()
        return super().__iter__()

    def _check_not_in_background(self) -> None:
        if self._background.running:
            raise RuntimeError(
                "this collector is collecting in the background (start() was called); "
                "iterate it inside `with collector.pause():`, not while it runs"
            )

    def _batches(self) -> Iterator[TensorDictBase | None]:
        self._check_open()
        flow = self._flow
        batches = flow.stacked() if self.config.sync else flow.first_ready()
        for batch in batches:
            if batch is not None and self.split_trajs:
                batch = split_trajectories(batch)
            if batch is not None and self.postproc is not None:
                batch = self.postproc(batch)
            yield batch

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds every worker distinctly and reproducibly from ``seed``.

        Worker ``i`` gets its own seed derived from ``seed`` (restarted workers a
        fresh one), where torchrl chains one seed through the workers in turn.

        Args:
            seed: the base seed.
            static_seed: torchrl's: each worker's env copies all get that worker's seed.

        Returns:
            As torchrl's: the seed to use next, the one the last worker's torchrl
            collector chained to after its own.

        Raises:
            TypeError: ``seed`` is not an int.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self._check_open()
        self._pool.seed = seed
        seeds = [(self._pool.worker_seed(i), static_seed) for i in range(self.num_collectors)]
        chained = self._pool.call_all("set_seed", seeds, timeout_s=self.config.batch_timeout_s)
        return int(chained[-1])

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
        extra = self.config.for_added_workers(
            create_env_fn,
            num_envs=num_envs,
            policy=policy,
            collector_kwargs=collector_kwargs,
            remote_configs=remote_configs,
        )
        ids = self._add_workers(extra)
        self.config.num_collectors = len(self._pool)
        return ids

    def worker_nodes(self, timeout_s: float = 30.0) -> list[str]:
        """The Ray node id each worker runs on."""
        self._check_open()
        return self._pool.nodes(timeout_s)

    def shutdown(
        self, timeout: float | None = None, *, shutdown_ray: bool = False, **kwargs: Any
    ) -> None:
        """Stops background collection, kills every worker this collector created, releases Ray.

        Idempotent. Background collection drains its requests in flight first
        (for up to ``timeout`` seconds, 30 by default).

        Args:
            timeout: seconds to let background collection drain.
            shutdown_ray: also shut Ray down, even a Ray tdscheme did not start
                (torchrl's argument; it ends every actor, replay buffers included).
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            self._background.stop(30.0 if timeout is None else timeout)
        except TimeoutError as err:
            logger.warning("%s; killing the workers anyway", err)
        self._pool.shutdown()
        self._lease.release(shutdown_ray=shutdown_ray)

    def __enter__(self) -> RayCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, frames_per_batch="
            f"{self.frames_per_batch}, sync={self.config.sync}, frames={self._stats.frames})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is shut down")
