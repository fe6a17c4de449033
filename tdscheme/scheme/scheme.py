"""Scheme: a training run composed from factories, iterated one loop step at a time.

A :class:`Scheme` builds the :class:`~tdscheme.learner.Learner` on the driver and
one *training loop*, the way this run trains:

* :class:`~tdscheme.scheme.on_policy_loop.OnPolicyLoop` (``num_grad_workers=0``):
  a :class:`~tdscheme.RayCollector` collects, the driver's Learner learns, weights
  are pushed every ``weight_push_interval`` updates;
* :class:`~tdscheme.scheme.grad_worker_loop.GradWorkerLoop`
  (``num_grad_workers > 0``): gradient workers collect and compute gradients;
* :class:`~tdscheme.scheme.off_policy_loop.OffPolicyLoop` (a ``storage_factory``):
  collectors fill a replay buffer, the learner samples it.

Every loop implements the whole :class:`~tdscheme.scheme.loop.TrainingLoop` protocol,
which the Scheme calls directly (:mod:`~tdscheme.scheme.factories` picks and builds
the loop); the Scheme adds what every run shares (counters, throughput, the state
envelope of :mod:`~tdscheme.scheme.state`). The
:class:`~tdscheme.engine.Trainer` runs a Scheme with logging, evaluation and
checkpoints; a user can also iterate one in their own loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from tdscheme.collectors import RayCollector
from tdscheme.episodes import FinishedEpisodes
from tdscheme.gradient_workers import GradientCoordinator
from tdscheme.runtime import RayLease
from tdscheme.runtime.closing import ShutdownOnExit
from tdscheme.runtime.placement import cluster_cpus
from tdscheme.runtime.threads import warn_driver_threads
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.factories import (
    EnvFactory,
    LearnerFactory,
    PolicyFactory,
    StorageFactory,
    build_learner,
    check_factories,
    make_loop,
)
from tdscheme.scheme.loop import TrainingLoop
from tdscheme.scheme.resources import fit_cpus
from tdscheme.scheme.state import check_state, upgrade_state
from tdscheme.validation import check_frame_budget

__all__ = ["TrainingLoop", "Scheme"]  # TrainingLoop: its home is tdscheme.scheme.loop

logger = logging.getLogger(__name__)


class Scheme(ShutdownOnExit):
    """Composes a run from factories and iterates collect -> learn -> push.

    ``policy_factory()`` returns the modules the algorithm needs, as a dict such as
    ``{"actor": ProbabilisticActor, "critic": ValueOperator}`` (or one module, taken
    as ``{"actor": module}``); ``learner_factory(**modules)`` builds the
    :class:`~tdscheme.learner.Learner` from them. The collector workers run
    ``learner.policy`` (the actor the loss was built with). Factories should be
    module-level functions or ``functools.partial`` of them, so that Ray (and later
    gradient workers) can pickle them.

    Each :meth:`step` returns a flat dict of floats:

    * ``frames``, ``iteration``, ``fps`` (frames trained on per second since the
      first step), ``time/iteration_s``, ``time/wait_s``, ``time/learn_s``;
    * ``train/episode_return``, ``train/episode_length``, ``train/episodes`` over the
      episodes that finished in the batch (present when some did and the env
      records ``("next", "episode_reward")`` / ``("next", "step_count")``, e.g.
      with torchrl's ``RewardSum`` and ``StepCounter`` transforms);
    * ``learner/<name>``: every metric of ``Learner.update`` (losses, ``grad_norm``,
      ``lr``, ...);
    * ``policy_lag/mean``, ``policy_lag/max``: weight pushes between the batch's
      weights and the newest ones, over its frames;
    * ``collector/<name>``: the numeric counters and timers of
      ``RayCollector.stats()``.

    With gradient workers (``config.num_grad_workers > 0``) there is no driver
    collector: each worker collects and computes gradients, and the coordinator
    (``self.coordinator``) turns them into updates of the driver's Learner
    (synchronous, asynchronous) or has the workers all-reduce them and mirrors
    rank 0's weights into the driver's Learner after every step (decentralized),
    so :attr:`policy` is always the newest policy. Each :meth:`step` is one
    coordinator step and returns ``frames``, ``iteration``, ``fps``,
    ``time/iteration_s``, ``train/episode_return`` and ``train/episodes`` (when an
    episode ended), ``learner/<name>`` (the workers' frame-weighted loss metrics,
    ``grad_norm``, ``lr``) and ``grad_workers/<name>``: ``wait_ms``, ``apply_ms``,
    ``dispatch_ms``, ``step_ms``, the workers' ``collect_ms``/``compute_ms``,
    ``grads_applied``, ``grads_dropped``, ``frames_dropped``, ``updates``,
    ``version``, ``restarts`` and, per mode, ``preempted``, ``staleness_mean``,
    ``staleness_max``, ``allreduce_ms``, ``mirror_ms`` (see
    :func:`tdscheme.scheme.grad_worker_loop.scheme_metrics`).

    Args:
        env_factory: builds one collector worker's (possibly batched) torchrl env.
        policy_factory: builds the modules, see above.
        learner_factory: builds the Learner from the modules.
        eval_env_factory: builds the evaluation env (kept for the Trainer).
        config: distribution settings (``SchemeConfig()`` when ``None``).
        storage_factory: builds a torchrl replay buffer (pytorchrl's name); with it
            the Scheme trains off-policy
            (:class:`~tdscheme.scheme.off_policy_loop.OffPolicyLoop`): the collectors
            fill the buffer (in the driver or
            Ray-held, ``config.buffer_location``) after ``config.init_random_frames``
            random frames, and the :class:`~tdscheme.learner.OffPolicyLearner`
            that ``learner_factory`` builds takes ``config.utd_ratio`` gradient
            steps per collected frame on its samples. Each step then reports
            ``frames`` collected into the buffer, ``replay/<name>`` (size, updates,
            measured update-to-data ratio, extend time), ``learner/<name>`` (means
            over the step's updates, with ``sample_ms``), ``policy_lag/*`` of the
            sampled frames and ``collector/<name>`` (frames written, dropped, lost).

    Raises:
        TypeError: a factory is not callable, or returns the wrong type.
        ValueError: ``policy_factory`` returns a dict without an ``"actor"``, or
            ``storage_factory`` is given with ``num_grad_workers > 0``.
        tdscheme.errors.GradientWorkerError: a gradient worker failed to start.

    Example:
        >>> # Needs Ray; see examples/ and tdscheme.presets
        >>> from tdscheme.presets import PRESETS  # doctest: +SKIP
        >>> preset = PRESETS["ppo-cartpole"]()  # doctest: +SKIP
        >>> with Scheme(**preset.factories(), config=preset.scheme) as scheme:  # doctest: +SKIP
        ...     for metrics in scheme:
        ...         print(metrics["frames"], metrics.get("train/episode_return"))
        ...         if metrics["frames"] >= 20_000:
        ...             break
    """

    def __init__(
        self,
        *,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
        learner_factory: LearnerFactory,
        eval_env_factory: EnvFactory | None = None,
        config: SchemeConfig | None = None,
        storage_factory: StorageFactory | None = None,
    ) -> None:
        self.config = SchemeConfig() if config is None else config
        if not isinstance(self.config, SchemeConfig):
            raise TypeError(f"config must be a SchemeConfig or None, got {self.config!r}")
        check_factories(
            self.config,
            env_factory=env_factory,
            policy_factory=policy_factory,
            learner_factory=learner_factory,
            eval_env_factory=eval_env_factory,
            storage_factory=storage_factory,
        )
        self.env_factory = env_factory
        self.eval_env_factory = eval_env_factory
        self.policy_factory = policy_factory
        self.learner_factory = learner_factory
        self.storage_factory = storage_factory
        self._closed = True  # until the loop exists
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed)
        self.modules, self.learner = build_learner(policy_factory, learner_factory)
        self.frames = 0
        self.iterations = 0
        self._session_frames = 0
        self._started_at: float | None = None
        lease = RayLease.acquire(self.config.ray_init_config)  # one Ray while the parts start
        try:  # what all the actors ask for, added up before any starts
            cpus = cluster_cpus()  # one look at the cluster for both
            self.config = fit_cpus(self.config, cluster_cpus=cpus)
            # strictly on-policy (max_policy_lag=0), the workers wait while the learner trains
            beside = self.config.num_grad_workers == 0 and self.config.max_policy_lag != 0
            warn_driver_threads(self.config.num_collectors if beside else 0, cpus)
            self.loop: TrainingLoop = make_loop(
                self.config,
                env_factory=env_factory,
                policy_factory=policy_factory,
                learner_factory=learner_factory,
                learner=self.learner,
                storage_factory=storage_factory,
            )
        finally:
            lease.release()
        self._closed = False

    @property
    def replay_buffer(self) -> Any:
        """The replay buffer of an off-policy run (``None`` without a ``storage_factory``)."""
        return self.loop.replay_buffer

    @property
    def collector(self) -> RayCollector | None:
        """The driver-side RayCollector (``None`` with gradient workers)."""
        return self.loop.collector

    @property
    def coordinator(self) -> GradientCoordinator | None:
        """The gradient workers' coordinator (``None`` without gradient workers)."""
        return self.loop.coordinator

    @property
    def policy(self) -> nn.Module:
        """The learner's (always up to date) policy, e.g. for evaluation."""
        return self.learner.policy

    def step(self) -> dict[str, float]:
        """Runs one iteration of the training loop: collect, learn, push (or one gradient-worker step).

        Returns:
            The iteration's metrics (see the class docstring).

        Raises:
            RuntimeError: the scheme is shut down, or :meth:`set_total_frames`'s
                budget is spent (:attr:`frames_left` is 0).
            tdscheme.WorkerError: a collector worker failed for good.
            tdscheme.errors.GradientWorkerError: a gradient worker failed
                for good.
            TimeoutError: no batch or gradient arrived within ``config.batch_timeout_s``.
            StopIteration: the budget's rest held no whole env step (a run resumed a few
                frames short of it): nothing was trained, and :attr:`frames_left` is 0.
        """
        if self._closed:
            raise RuntimeError("Scheme is shut down")
        if self.frames_left == 0:
            raise RuntimeError(
                f"no frame is left to train on: the budget of set_total_frames is spent at "
                f"{self.frames} frames; raise it with set_total_frames, or stop stepping"
            )
        if self._started_at is None:
            self._started_at = time.perf_counter()
        start = time.perf_counter()
        frames, loop_metrics = self.loop.step()
        self.frames += frames
        self._session_frames += frames
        self.iterations += 1
        now = time.perf_counter()
        metrics: dict[str, float] = {
            "frames": float(self.frames),
            "iteration": float(self.iterations),
            "fps": self._session_frames / max(now - self._started_at, 1e-9),
            "time/iteration_s": now - start,
        }
        metrics.update(loop_metrics)
        return metrics

    def set_env_config(self, config: Any, **kwargs: Any) -> int:
        """Pushes an env config to whoever collects: the collector workers, or every
        gradient worker's collectors (``RayCollector.set_env_config``'s arguments:
        ``worker_ids``, ``apply="reset"`` or ``"now"``, ``apply_env_config``).

        Returns:
            The config's version; frames carry it in ``("collector", "env_config_version")``.
        """
        return self.loop.set_env_config(config, **kwargs)

    def wait_for_env_config(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        """Blocks until every worker acknowledged ``version`` (``None``: the newest); returns theirs."""
        return self.loop.wait_for_env_config(version, timeout_s)

    @property
    def last_episodes(self) -> FinishedEpisodes | None:
        """The episodes that ended in the last step: returns, and the env-config tasks they
        ran and versions they started under (``None``: none recorded; gradient workers: their mean return)."""
        return self.loop.episodes

    def set_total_frames(self, total_frames: int) -> None:
        """Trains on at most ``total_frames`` frames in all (those resumed from included).

        With collectors (on- and off-policy) the budget is exact: no frame past it
        is asked of a worker, and the batch that would pass it is cut along time,
        its surplus booked as ``discarded`` in the collector's frame ledger. With
        gradient workers each step trains on whole worker batches, so the last step
        may pass ``total_frames`` by less than one step's frames; stop stepping once
        :attr:`frames` reaches it. The :class:`~tdscheme.engine.Trainer` calls this
        with its ``total_frames``.

        Args:
            total_frames: an int >= 0, or -1 for no limit.

        Raises:
            ValueError: ``total_frames`` is neither.
        """
        check_frame_budget("total_frames", total_frames)
        self.loop.frame_limit = None if total_frames == -1 else total_frames
        collector = self.collector
        if collector is None:
            return
        if total_frames == -1:
            collector.set_total_frames(-1)
        else:
            # frames written into a Ray-held buffer that no step counted yet are part of it
            done = collector.collected_frames - self.loop.frames_pending
            collector.set_total_frames(done + max(0, total_frames - self.frames))

    @property
    def frames_left(self) -> int | None:
        """Frames the collector may still deliver under :meth:`set_total_frames`.

        ``None`` without a budget (and with gradient workers); 0 once it is spent,
        also when the last batch was cut short of it (a batched env's batch is cut
        at whole steps). Frames written into a Ray-held buffer that no step counted
        yet are still left: the run steps until it has trained on them.
        """
        left = None if self.collector is None else self.collector.frames_left
        return None if left is None else left + self.loop.frames_pending

    def __iter__(self) -> Iterator[dict[str, float]]:
        """Yields :meth:`step` until :meth:`set_total_frames`'s budget is spent (forever without one)."""
        with contextlib.suppress(StopIteration):  # the budget's rest held no whole env step
            while self.frames_left != 0:
                yield self.step()

    # -- state ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The counters and the driver's state (its learner and its workers' state).

        Returns:
            ``{"learner", "frames", "iterations", ...}``: with collectors also
            ``"updates_since_push"`` and ``"collector"`` (off-policy: and ``"replay"``,
            the buffer's counters); with gradient workers
            ``"grad_workers"`` (the coordinator's mode and totals; ``"learner"``
            is the state the workers continue from, in decentralized mode rank
            0's). Plain data (tensors, numbers, dicts) that a checkpoint holds as is.
        """
        return {"frames": self.frames, "iterations": self.iterations, **self.loop.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` and pushes the restored weights to the workers.

        Call it before the first :meth:`step`: batches already in flight were
        collected with the weights the workers had. With gradient workers, the
        gradients in flight are waited for and discarded, and every worker loads
        the restored state.

        Args:
            state: a dict from :meth:`state_dict` of a scheme built the same way.

        Raises:
            ValueError: keys are missing, the learner state does not fit, or the
                state comes from a scheme with (or without) gradient workers, or
                with gradient workers of another mode, unlike this one.
        """
        state = upgrade_state(state)
        check_state(
            state,
            state_key=self.loop.state_key,
            num_grad_workers=self.config.num_grad_workers,
        )
        self.loop.load_state_dict(state)
        self.frames = int(state["frames"])
        self.iterations = int(state["iterations"])

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """A ``with`` block in which no worker writes into a Ray-held replay buffer.

        A checkpoint's state and its buffer dump taken inside it agree; without a
        Ray-held buffer nothing changes between steps, and nothing is held.
        """
        return self.loop.paused()

    def dump_replay_buffer(self, path: str) -> None:
        """Writes the replay buffer to the directory ``path`` (torchrl's ``dumps``).

        Raises:
            RuntimeError: the scheme has no replay buffer (no ``storage_factory``).
        """
        self.loop.dump_buffer(path)

    def load_replay_buffer(self, path: str) -> None:
        """Reads a replay buffer written by :meth:`dump_replay_buffer` (torchrl's ``loads``).

        Raises:
            RuntimeError: the scheme has no replay buffer (no ``storage_factory``).
        """
        self.loop.load_buffer(path)

    def set_seed(self, seed: int) -> int:
        """Reseeds every worker's envs (and, for gradient workers, their torch) from ``seed``.

        The Trainer calls it after a resume, so that a resumed run's envs do not
        replay the first session's.

        Args:
            seed: the base seed; each worker gets a distinct one derived from it.

        Returns:
            ``seed``.
        """
        return self.loop.set_seed(seed)

    # -- lifetime ------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the driver's workers and releases Ray. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.loop.shutdown()


    def __repr__(self) -> str:
        return (f"Scheme(frames={self.frames}, iterations={self.iterations}, num_collectors="
                f"{self.config.num_collectors}, num_grad_workers={self.config.num_grad_workers}, "
                f"learner={self.learner!r})")  # fmt: skip
