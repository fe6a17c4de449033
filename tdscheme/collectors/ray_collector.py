"""RayCollector: the driver-side iterable over batches from remote torchrl collectors.

It builds its parts (``collectors/driver/``, ``collectors/torchrl_compat/``) and calls them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from tensordict import TensorDictBase
from torchrl.collectors.utils import split_trajectories

from tdscheme.collectors.driver.background import BackgroundCollection
from tdscheme.collectors.driver.budget import FrameBudget
from tdscheme.collectors.driver.env_config import EnvConfigs
from tdscheme.collectors.driver.flow import BatchFlow
from tdscheme.collectors.driver.pool import WorkerPool
from tdscheme.collectors.driver.stats import CollectorParts, CollectorStats, StatsReport
from tdscheme.collectors.driver.weights import WeightPusher
from tdscheme.collectors.settings.config import RayCollectorConfig
from tdscheme.collectors.settings.specs import (
    remote_configs,
    resource_arguments,
    worker_specs,
)
from tdscheme.collectors.settings.torchrl_args import is_policy_service
from tdscheme.collectors.torchrl_compat.auto_push import AutoPushRule
from tdscheme.collectors.torchrl_compat.learner_sync import LearnerWeightSync
from tdscheme.collectors.torchrl_compat.remote_calls import RemoteCalls
from tdscheme.collectors.torchrl_compat.state import CollectorState
from tdscheme.collectors.torchrl_compat.surface import TorchrlSurface
from tdscheme.collectors.torchrl_compat.worker_calls import CollectorWorker
from tdscheme.episodes import FinishedEpisodes
from tdscheme.facades import documented_by
from tdscheme.rollout.env_config_push import set_env_config_method
from tdscheme.rollout.torchrl_names import BaseCollector
from tdscheme.runtime import RayLease
from tdscheme.runtime.closing import ShutdownOnExit
from tdscheme.transport import TensorDictCodec

logger = logging.getLogger(__name__)


class RayCollector(ShutdownOnExit, TorchrlSurface, BaseCollector):
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

    Weight pushes: :meth:`update_policy_weights_` sends weights with one ``ray.put``
    shared by all workers; each acknowledges the version when they arrive (even
    mid-batch) and runs it from its next batch. Automatic pushes follow torchrl's
    ``update_after_each_batch`` and ``max_weight_update_interval``.

    Env configs are versioned the same way: :meth:`set_env_config` pushes one (each env
    copy runs it from its next reset, or at once), every frame carries
    ``("collector", "env_config_version")``, :meth:`wait_for_env_config` waits for the acks.

    With torchrl's trainers and ``learner_backend="ray"``, torchrl's learner publishes
    the weights straight to the workers, stamped with its model version, and driver
    pushes stop (:class:`~tdscheme.collectors.torchrl_compat.learner_sync.LearnerWeightSync`,
    wrapped around the plain pusher only then, or with ``weight_sync_schemes`` or a
    policy service given).

    Args:
        create_env_fn: the env factory (or one per worker), by position or keyword.
        policy: the policy the workers act with, by position or keyword.
        **settings: every other setting of :class:`~tdscheme.collectors.RayCollectorConfig`
            (the one declaration of their names, defaults and meaning: see its Args), by
            keyword, as torchrl's ``RayCollector`` takes them.
            ``inspect.signature(RayCollector)`` lists them all.

    torchrl's attribute names (``remote_collectors``, ``num_workers``,
    ``collector_kwargs``, the device lists, ``stop_remote_collectors()``, ...) come from
    :class:`~tdscheme.collectors.torchrl_compat.surface.TorchrlSurface`; the rest of the
    surface is one-line calls on composed objects, each documented where it lives:
    weight pushes (:mod:`~tdscheme.collectors.driver.weights`, and torchrl's learner
    publication in :mod:`~tdscheme.collectors.torchrl_compat.learner_sync`), ``stats()``
    (:mod:`~tdscheme.collectors.driver.stats`), background collection
    (:mod:`~tdscheme.collectors.driver.background`), ``map_fn`` and ``get_distant_attr``
    (:mod:`~tdscheme.collectors.torchrl_compat.remote_calls`), ``state_dict`` /
    ``load_state_dict`` in torchrl's per-worker format
    (:mod:`~tdscheme.collectors.torchrl_compat.state`).

    Raises:
        ValueError, TypeError: bad arguments, named with the accepted values.

    Example:
        >>> # Needs Ray; see examples/collect_cartpole.py
        >>> import functools  # doctest: +SKIP
        >>> from tdscheme import RayCollector  # doctest: +SKIP
        >>> from tdscheme.envs import make_env  # doctest: +SKIP
        >>> from tdscheme.presets.actor_critic import actor_critic_modules  # doctest: +SKIP
        >>> actor = actor_critic_modules("CartPole-v1")["actor"]  # doctest: +SKIP
        >>> with RayCollector(functools.partial(make_env, "CartPole-v1"), actor,
        ...                   frames_per_batch=1000, total_frames=10_000,
        ...                   num_collectors=2) as collector:  # doctest: +SKIP
        ...     for batch in collector:
        ...         print(batch["collector", "worker_id"][0].item(), batch.numel())
    """

    @classmethod
    def from_config(cls, config: RayCollectorConfig) -> RayCollector:
        """Builds a collector from a :class:`RayCollectorConfig`."""
        collector = cls.__new__(cls)
        collector._setup(config)
        return collector

    def _setup(self, config: RayCollectorConfig) -> None:
        BaseCollector.__init__(  # torchrl's base (TorchrlSurface.__init__ is the signature)
            self,
            pre_collect_hook=config.pre_collect_hook,
            post_collect_hook=config.post_collect_hook,
        )
        self.config = config
        self.policy = config.policy
        self.frames_per_batch, self.total_frames = config.frames_per_batch, config.total_frames
        self.postproc, self.split_trajs = config.postproc, config.split_trajs
        self.replay_buffer = config.replay_buffer
        self._iterator, self._closed = None, False
        self._lease = RayLease.acquire(config.ray_init_config)
        self._pool = WorkerPool(
            CollectorWorker, max_restarts=config.max_restarts, seed=config.seed,
            min_workers=config.min_workers,
        )  # fmt: skip
        self._stats = CollectorStats()
        parts = CollectorParts(
            config, self._pool, self._stats, TensorDictCodec(config.compress), self._check_open
        )
        self._parts = parts
        self._auto_pushes = AutoPushRule(
            update_after_each_batch=config.update_after_each_batch,
            max_weight_update_interval=config.max_weight_update_interval,
        )
        self._pusher = WeightPusher(parts, on_push=self._auto_pushes.pushed)
        # torchrl's weight-sync surface only where it is used (a scheme or a policy service
        # given here; torchrl's learner asking for the scheme: _learner_weight_sync)
        self._weights: WeightPusher | LearnerWeightSync = self._pusher
        if config.weight_sync_schemes or is_policy_service(config.policy):
            self._weights = LearnerWeightSync(self._pusher, parts)
        automatic = config.update_after_each_batch or config.max_weight_update_interval >= 0
        after_batch = self._after_batch if automatic else None  # torchrl's rule, when asked for
        self._flow = BatchFlow(self._pool, config, parts.stats, parts.codec, after_batch)
        self._background = BackgroundCollection(self._batches, self._flow.request_stop, parts=parts)
        self._remote = RemoteCalls(parts)
        self._state = CollectorState(parts)
        self._report = StatsReport(
            parts,
            running_versions=self._flow.running_versions,
            background=self._background,
            is_closed=lambda: self._closed,
        )
        try:
            self._add_workers(config)
        except BaseException:
            self.shutdown()
            raise

    def _add_workers(self, config: RayCollectorConfig) -> list[int]:
        """Starts one worker per spec of ``config``, once Ray can place them; returns their ids."""
        remotes = remote_configs(config)
        if config.placement == "check":  # "wait": an autoscaler may add the nodes
            self._pool.check_fits(remotes, argument=resource_arguments(config))
        ids = []
        for spec, remote in zip(worker_specs(config), remotes, strict=True):
            ids.append(self._pool.add(spec, remote))
            self._auto_pushes.add_workers(1)
        self._pool.wait_started(
            ids, timeout_s=self.config.actor_start_timeout_s, argument=resource_arguments(config)
        )
        return ids

    # -- the public surface: one-line calls on the composed parts --------------------

    @documented_by(WeightPusher.push)
    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs: Any) -> None:
        self._weights.push(policy_or_weights, **kwargs)

    @documented_by(WeightPusher.wait)
    def wait_for_weights(self, timeout_s: float = 60.0) -> list[int]:
        return self._pusher.wait(timeout_s)

    # one signature and one check for every class that pushes env configs; its own docstring
    set_env_config = set_env_config_method(
        """Sends an env config to the workers (one ``ray.put``); returns its version.

        Versioned like weights: each push gets the next version (one integer per push,
        starting at 1), each worker acknowledges it when it arrives (even while it
        collects: :meth:`wait_for_env_config` blocks until all did) or refuses it (an
        env whose ``check_env_config`` raises; see the module), and every frame carries
        ``("collector", "env_config_version")``: the version its env copy ran. A worker
        rebuilt after a death starts with the newest config it took (not a refused one).

        How an env receives it: its ``set_env_config(config)`` (the gymnasium env's,
        through its wrappers and on every copy of a vector env, or the torchrl env's), or
        ``apply_env_config`` (:mod:`tdscheme.envs.env_config`).

        Args:
            config: a small picklable value (a dict, a dataclass, a tensor of task ids),
                or a task distribution: ``{"levels": [...], "probs": [...]}`` (or a
                :class:`~tdscheme.envs.env_config.TaskDistribution`), from which each env
                copy draws a level at each of its resets with its worker's seed; frames
                record the level's index in ``("collector", "env_task")``.
            worker_ids: push to these workers only (default: all).
            apply: ``"reset"`` (default): each env copy runs it from its own next reset
                (no episode is changed midway; a copy mid-episode keeps stamping the older
                version until it resets); ``"now"``: every copy runs it from its next step.
            apply_env_config: ``fn(env, config)`` applying it to a worker's torchrl env
                (every copy at once), for envs without ``set_env_config``.

        Returns:
            The version of this config.

        Raises:
            ValueError: an unknown ``apply`` or worker id, or a bad task distribution.
            TypeError: ``config`` (or ``apply_env_config``) cannot be pickled, or a
                checkpoint cannot hold it (:mod:`tdscheme.rollout.env_config_state`: a
                lambda, an object of a class it does not accept), or ``apply_env_config``
                is not callable.
            WorkerError: an earlier push was refused by a worker (named) and no call
                raised it yet: an env that offers no way to receive a config, a config
                the env raised on, a version that goes backwards.

        Example:
            >>> # Needs Ray; see the README's "Env configs and curricula"
            >>> version = collector.set_env_config({"g": 12.0})  # doctest: +SKIP
            >>> collector.wait_for_env_config(version, timeout_s=10.0)  # doctest: +SKIP
            [1, 1]
        """
    )

    def _env_config_sender(self) -> EnvConfigs:
        self._check_open()
        return self._pool.env_configs

    @documented_by(EnvConfigs.wait)
    def wait_for_env_config(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        self._check_open()
        return self._pool.env_configs.wait(version, timeout_s)

    def _after_batch(self, worker_ids: list[int]) -> None:
        """torchrl's automatic pushes, when the consumer asks for the next batch."""
        due = self._auto_pushes.due(worker_ids)
        if due:
            self._weights.auto_push(due)

    @property
    def learner_publishes_weights(self) -> bool:
        """Whether a torchrl learner publishes the policy weights (driver pushes are off)."""
        weights = self._weights
        return isinstance(weights, LearnerWeightSync) and weights.learner_publishes_weights

    @documented_by(LearnerWeightSync.scheme)
    def _learner_weight_sync(self, *, new_generation: bool = False) -> Any:
        if not isinstance(self._weights, LearnerWeightSync):
            self._weights = LearnerWeightSync(self._pusher, self._parts)
        return self._weights.scheme(new_generation=new_generation)

    @documented_by(StatsReport.report)
    def stats(self, workers: str = "aggregate", *, timeout: float | None = 10.0) -> dict[str, Any]:
        return self._report.report(workers, timeout=timeout)

    @documented_by(CollectorStats.take_written_episodes)
    def written_episodes(self) -> FinishedEpisodes:
        return self._stats.take_written_episodes()

    @documented_by(StatsReport.counters)
    def counters(self, *, alive_max_age_s: float = 10.0) -> dict[str, Any]:
        return self._report.counters(alive_max_age_s=alive_max_age_s)

    @documented_by(RemoteCalls.map_fn)
    def map_fn(
        self, method_name: str, list_of_args: Any = None, list_of_kwargs: Any = None
    ) -> list:
        return self._remote.map_fn(method_name, list_of_args, list_of_kwargs)

    @documented_by(RemoteCalls.get_distant_attr)
    def get_distant_attr(self, attr: str) -> list[Any]:
        return self._remote.get_distant_attr(attr)

    @documented_by(CollectorState.state_dict)
    def state_dict(self) -> list[Any]:
        return self._state.state_dict()

    @documented_by(CollectorState.load_state_dict)
    def load_state_dict(self, state_dict: Any) -> None:
        self._state.load_state_dict(state_dict)

    @documented_by(BackgroundCollection.start)
    def start(self, *, hold_while: Callable[[], bool] | None = None) -> None:
        self._background.start(hold_while=hold_while)

    @property
    def is_running(self) -> bool:
        """Whether background collection (:meth:`start`) is running."""
        return self._background.running

    @documented_by(BackgroundCollection.pause)
    def pause(
        self, timeout: float = 30.0, *, resume: bool = True
    ) -> contextlib.AbstractContextManager[None]:
        return self._background.pause(timeout, resume=resume)

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

    @documented_by(FrameBudget.set_total_frames)
    def set_total_frames(self, total_frames: int) -> None:
        self._flow.budget.set_total_frames(total_frames)
        self.total_frames = total_frames

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

    @documented_by(WorkerPool.seed_all)
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        self._check_open()
        return self._pool.seed_all(seed, static_seed, timeout_s=self.config.batch_timeout_s)

    def worker_nodes(self, timeout_s: float = 30.0) -> list[str]:
        """The Ray node id each worker runs on."""
        self._check_open()
        return self._pool.nodes(timeout_s)

    def shutdown(
        self, timeout: float | None = None, shutdown_ray: bool = False, **kwargs: Any
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

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, frames_per_batch="
            f"{self.frames_per_batch}, sync={self.config.sync}, frames={self._stats.frames})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is shut down")


# torchrl's constructor, written out in TorchrlSurface; its errors name this class
RayCollector.__init__.__qualname__ = "RayCollector.__init__"
