"""SchemeConfig: how a Scheme distributes collection and, optionally, gradient computation.

It is converted once into the lower layers' configs (:meth:`SchemeConfig.collector_config`,
:meth:`SchemeConfig.grad_workers_config`), and checked with their own rules
(:func:`~tdscheme.stragglers.check_sync_rules`,
:func:`~tdscheme.gradient_workers.config.check_mode_rules`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tdscheme.gradient_workers.config import GradientWorkersConfig, check_mode_rules
from tdscheme.runtime.ray_lease import check_init_keys
from tdscheme.runtime.ray_options import check_actor_options
from tdscheme.scheme.config_checks import (
    check_async_learner,
    check_gradient_worker_batches,
    check_learner_group,
)
from tdscheme.stragglers import PreemptionConfig, check_sync_rules
from tdscheme.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    invalid,
)

if TYPE_CHECKING:  # torch and torchrl: imported when a collector is built, not to check settings
    from tdscheme.collectors.settings.config import RayCollectorConfig

__all__ = ["BUFFER_LOCATIONS", "GRAD_COMMUNICATIONS", "SchemeConfig"]

#: The accepted values of ``SchemeConfig.grad_communication``.
GRAD_COMMUNICATIONS = ("synchronous", "asynchronous")

#: The accepted values of ``SchemeConfig.buffer_location`` (off-policy runs).
BUFFER_LOCATIONS = ("auto", "driver", "ray")


@dataclasses.dataclass
class SchemeConfig:
    """How a :class:`Scheme` distributes collection and, optionally, gradient computation.

    With ``num_grad_workers=0`` (the default) the driver trains one Learner on the
    batches of ``num_collectors`` collector workers. With ``num_grad_workers > 0``
    each gradient worker (a Ray actor) steps its own ``num_collectors`` collectors,
    computes gradients with its own copy of the learner, and the settings of the
    collector workers (``sync``, ``prefetch_batches``, ``weight_push_interval``,
    ``compress``, ``collector_resources``) are not used; ``max_policy_lag`` is
    (see :meth:`grad_workers_config`).

    Args:
        num_collectors: collector workers (Ray actors), each stepping its own envs;
            with gradient workers: the torchrl collectors of each gradient worker.
        frames_per_batch: frames per learner update. With ``sync=True`` each worker
            collects ``frames_per_batch / num_collectors`` of them; with ``sync=False``
            each batch comes whole from the first worker that finishes. With
            gradient workers, a synchronous (or decentralized) update averages one
            gradient per worker, each over ``frames_per_batch / num_grad_workers``
            frames; an asynchronous update is one worker's gradient over
            ``frames_per_batch`` frames.
        sync: stack one rollout per worker into each batch (``True``) or train on
            each worker's batch as soon as it is ready (``False``).
        preemption: ``{"fraction_workers": a, "fraction_samples": b}`` (sync only):
            cut stragglers off once enough workers and frames are in. With gradient
            workers: synchronous, centralized only; a gradient left out is dropped
            and counted.
        max_policy_lag: drop batches collected with weights more than this many
            pushes old; 0 is strictly on-policy (no overlap of collection and
            training); ``None``: no bound. With gradient workers: synchronous ones
            always compute on the newest weights; asynchronous ones drop gradients
            computed on weights more than this many versions old.
        prefetch_batches: requests each worker keeps in flight while the learner
            trains; ``None``: the collector's default (1, or 0 when
            ``max_policy_lag=0``).
        weight_push_interval: push the learner's weights to the workers every this
            many learner updates.
        compress: lz4-compress batches on the wire (``True``) or only the listed keys.
        collector_resources: Ray actor options per collector worker, e.g.
            ``{"num_cpus": 0.5}`` (one dict for all, or one per worker); ``None``:
            one CPU each (and 0.2 of a GPU when CUDA is available, as torchrl).
        ray_init_config: ``ray.init`` arguments used only when Ray is not running;
            ``{"address": "auto"}`` joins a cluster; with no address, a cluster of
            ``RAY_ADDRESS`` or ``ray start`` is joined as ``ray.init`` does (see
            :class:`tdscheme.runtime.RayLease`).
        seed: seeds torch before the modules are built (reproducible initial
            weights) and each worker distinctly; ``None`` leaves them unseeded.
        batch_timeout_s: raise if no batch arrives for this long while the workers
            still answer; with gradient workers: the longest wait for a gradient (a
            centralized worker silent this long is declared hung and rebuilt).
        actor_start_timeout_s: a worker Ray has not placed or built this long
            after it was asked for is an error (impossible requests are one at once).
        placement: ``"check"`` (default): requests beyond the cluster's resources are
            refused at once; ``"wait"``: no such check, for an autoscaling cluster (the
            workers wait ``actor_start_timeout_s`` to be placed: raise it).
        worker_stall_timeout_s: a collector worker without progress (env steps)
            this long is declared hung, killed and rebuilt (``None``: no check).
        max_restarts: times each collector (or gradient) worker may be rebuilt after
            dying or hanging, over the whole run (RLlib's
            ``max_num_env_runner_restarts``); raise it for long runs.
        min_workers: elastic collection: a collector worker past its restarts is
            retired and the run goes on while this many remain (``None``: it stops
            the run).
        num_grad_workers: gradient workers (Ray actors), each with its own
            collectors and learner copy; 0: none (the driver learns on collected
            batches).
        grad_communication: ``"synchronous"`` (one gradient per worker, averaged by
            frame count, one update, weights broadcast) or ``"asynchronous"``
            (A3C-style: each gradient applied as it arrives, fresh weights back to
            its sender); used when ``num_grad_workers > 0``.
        decentralized: synchronous only: the gradient workers all-reduce their
            gradients (torch.distributed gloo) and each applies the same update; the
            driver mirrors their weights. Rejected with ``"asynchronous"``.
        grad_compress: lz4-compress gradients and weights on the wire; used when
            ``num_grad_workers > 0``.
        grad_worker_resources: Ray actor options per gradient worker, e.g.
            ``{"num_cpus": 1}`` (``None``: one CPU each).
        grads_per_step: asynchronous only: gradients applied (or dropped) per
            :meth:`Scheme.step` (``None``: ``num_grad_workers``).
        max_grad_staleness: asynchronous only: drop (and count) a gradient computed
            on weights more than this many learner versions old (``None``: no bound).
        utd_ratio: off-policy (a Scheme with a ``storage_factory``): gradient steps
            per collected frame (update-to-data ratio, ``> 0``; fractions carry over
            between steps, so ``0.25`` is one step every 4 frames).
        init_random_frames: off-policy: frames collected with random actions (the
            env's action spec, as torchrl's collectors) before the policy acts, split
            over the collectors; no gradient step is taken before they are in.
        buffer_location: off-policy: where the replay buffer lives, ``"driver"`` (a
            buffer in the driver process, extended by the driver with each batch the
            collectors send), ``"ray"`` (a Ray-held ``RayReplayBuffer`` that the
            workers write into while they collect in the background) or ``"auto"``
            (the default: ``"ray"`` with a learner group, ``num_learners > 0``, whose
            ranks sample it, else ``"driver"``; :meth:`replay_location`); the
            ``storage_factory`` must build that kind of buffer.
        async_learner: IMPALA / APPO (:class:`~tdscheme.scheme.async_loop.AsyncLoop`): the
            learner takes each worker's batch as soon as it is ready (``sync=False``) from
            a queue the learner paces: each worker works ``prefetch_batches`` requests
            ahead (default 2) and then waits for the learner; frames over
            ``max_policy_lag`` are dropped and counted; the lag is logged as a histogram.
        checkpoint_replay_buffer: off-policy: checkpoints also hold the replay buffer
            (torchrl's ``dumps``/``loads``, a directory beside each checkpoint file),
            so a resumed run samples from the same frames.
        num_learners: learner ranks in one gloo group (a
            :class:`~tdscheme.learner.group.LearnerGroup`), each training on its env
            rows of every batch, as one Learner on the whole batch (on-policy and
            IMPALA / APPO runs); 0: the driver's Learner.
        learner_resources: Ray actor options per learner rank (``None``: one CPU each).

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> SchemeConfig(num_collectors=2, frames_per_batch=4096).weight_push_interval
        1
        >>> SchemeConfig(num_collectors=0)
        Traceback (most recent call last):
        ...
        ValueError: num_collectors=0 is invalid; accepted: an int >= 1
        >>> SchemeConfig(num_grad_workers=2, frames_per_batch=512).frames_per_gradient()
        256
        >>> SchemeConfig(num_grad_workers=2, grad_communication="asynchronous",
        ...              decentralized=True)
        Traceback (most recent call last):
        ...
        ValueError: decentralized=True is invalid with grad_communication='asynchronous'; \
accepted: decentralized=False, or grad_communication='synchronous' (an all-reduce is a \
synchronous step)
    """

    num_collectors: int = 2
    frames_per_batch: int = 4096
    sync: bool = False
    preemption: Mapping[str, float] | None = None
    max_policy_lag: int | None = None
    prefetch_batches: int | None = None
    weight_push_interval: int = 1
    compress: bool = False
    collector_resources: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ray_init_config: Mapping[str, Any] | None = None
    seed: int | None = 0
    batch_timeout_s: float = 600.0
    actor_start_timeout_s: float = 120.0
    placement: str = "check"
    worker_stall_timeout_s: float | None = 120.0
    max_restarts: int = 3
    min_workers: int | None = None
    num_grad_workers: int = 0
    grad_communication: str = dataclasses.field(
        default="synchronous", metadata={"choices": GRAD_COMMUNICATIONS}
    )
    decentralized: bool = False
    grad_compress: bool = False
    grad_worker_resources: Mapping[str, Any] | None = None
    grads_per_step: int | None = None
    max_grad_staleness: int | None = None
    utd_ratio: float = 1.0
    init_random_frames: int = 0
    buffer_location: str = dataclasses.field(
        default="auto", metadata={"choices": BUFFER_LOCATIONS}
    )
    checkpoint_replay_buffer: bool = False
    async_learner: bool = False
    num_learners: int = 0
    learner_resources: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("num_collectors", "frames_per_batch", "weight_push_interval"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("num_grad_workers", self.num_grad_workers, minimum=0)
        check_int("max_restarts", self.max_restarts, minimum=0)
        for name in ("max_policy_lag", "prefetch_batches", "seed"):
            check_int(name, getattr(self, name), minimum=0, optional=True)
        for name in ("sync", "compress", "decentralized", "grad_compress"):
            check_bool(name, getattr(self, name))
        check_choice("grad_communication", self.grad_communication, GRAD_COMMUNICATIONS)
        check_choice("placement", self.placement, ("check", "wait"))
        check_positive_number("batch_timeout_s", self.batch_timeout_s)
        check_positive_number("utd_ratio", self.utd_ratio)
        check_int("init_random_frames", self.init_random_frames, minimum=0)
        check_choice("buffer_location", self.buffer_location, BUFFER_LOCATIONS)
        check_bool("checkpoint_replay_buffer", self.checkpoint_replay_buffer)
        check_bool("async_learner", self.async_learner)
        check_int("num_learners", self.num_learners, minimum=0)
        if self.async_learner:
            check_async_learner(self)
        check_learner_group(self)
        for name in (
            "collector_resources", "ray_init_config", "grad_worker_resources", "learner_resources"
        ):  # fmt: skip
            value = getattr(self, name)
            kinds = (Mapping, list, tuple) if name == "collector_resources" else Mapping
            if value is not None and not isinstance(value, kinds):
                raise invalid(name, value, "None or a dict of Ray options")
        if self.ray_init_config is not None:
            check_init_keys(self.ray_init_config)
        resources = self.collector_resources
        for i, entry in enumerate(resources if isinstance(resources, (list, tuple)) else []):
            check_actor_options(f"collector_resources[{i}]", entry)
        for name in ("collector_resources", "grad_worker_resources", "learner_resources"):
            if isinstance(getattr(self, name), Mapping):
                check_actor_options(name, getattr(self, name))
        preemption = PreemptionConfig.from_arg(self.preemption)
        check_mode_rules(
            communication=self.grad_communication,
            decentralized=self.decentralized,
            grads_per_step=self.grads_per_step,
            max_grad_staleness=self.max_grad_staleness,
            preemption=preemption if self.num_grad_workers else PreemptionConfig(),
            communication_name="grad_communication",
        )
        if self.num_grad_workers == 0:
            check_sync_rules(
                frames_per_batch=self.frames_per_batch,
                num_collectors=self.num_collectors,
                sync=self.sync,
                preemption=preemption,
            )
        else:
            check_gradient_worker_batches(self)

    # -- the lower layers' configs ---------------------------------------------------------

    def collector_config(
        self,
        env_factory: Any,
        policy: Any,
        *,
        replay_buffer: Any = None,
        offpolicy: bool = False,
        drop_nonfinite_frames: bool = False,
    ) -> RayCollectorConfig:
        """The driver collector's settings (``num_grad_workers == 0``): the one conversion.

        Args:
            env_factory: builds one collector worker's env.
            policy: the module the workers run (the learner's policy).
            replay_buffer: a Ray-held buffer the workers write into
                (``buffer_location="ray"``); ``None``: batches come to the driver.
            offpolicy: an off-policy run: ``init_random_frames`` applies.
            drop_nonfinite_frames: the workers leave frames with NaN / inf out of
                ``replay_buffer`` (the learner's ``drop_nonfinite_frames``).

        Example:
            >>> from functools import partial
            >>> from tdscheme.envs import make_env
            >>> cfg = SchemeConfig(num_collectors=2, frames_per_batch=512, sync=True)
            >>> rc = cfg.collector_config(partial(make_env, "CartPole-v1"), None)
            >>> rc.frames_per_worker, rc.total_frames, rc.num_collectors
            (256, -1, 2)
        """
        from tdscheme.collectors.settings.config import RayCollectorConfig

        return RayCollectorConfig(
            env_factory,
            policy,
            frames_per_batch=self.frames_per_batch,
            total_frames=-1,
            num_collectors=self.num_collectors,
            sync=self.sync,
            preemption=self.preemption,
            max_policy_lag=self.max_policy_lag,
            prefetch_batches=2
            if self.async_learner and not self.prefetch_batches
            else self.prefetch_batches,
            compress=self.compress,
            remote_configs=self.collector_resources,
            ray_init_config=self.ray_init_config,
            seed=self.seed,
            batch_timeout_s=self.batch_timeout_s,
            actor_start_timeout_s=self.actor_start_timeout_s,
            placement=self.placement,
            worker_stall_timeout_s=self.worker_stall_timeout_s,
            max_restarts=self.max_restarts,
            min_workers=self.min_workers,
            init_random_frames=self.init_random_frames if offpolicy else -1,
            replay_buffer=replay_buffer,
            drop_nonfinite_frames=drop_nonfinite_frames and replay_buffer is not None,
        )

    def grad_workers_config(self) -> GradientWorkersConfig:
        """The gradient workers' settings (``num_grad_workers > 0``): the one conversion.

        ``frames_per_batch`` stays the frames of one learner update: each worker
        collects :meth:`frames_per_gradient` frames per gradient.
        ``batch_timeout_s`` becomes the longest wait for a gradient, ``seed`` the
        workers' base seed. ``max_policy_lag`` is applied: synchronous and
        decentralized gradients are always computed on the newest weights (lag
        0, so any bound holds); asynchronous gradients on weights more than
        ``max_policy_lag`` versions old are dropped, as with
        ``max_grad_staleness`` (the smaller of the two applies).

        Raises:
            ValueError: ``num_grad_workers`` is 0.

        Example:
            >>> cfg = SchemeConfig(num_grad_workers=2, num_collectors=1, frames_per_batch=512,
            ...                    decentralized=True).grad_workers_config()
            >>> cfg.mode, cfg.frames_per_batch, cfg.num_collectors
            ('decentralized', 256, 1)
            >>> SchemeConfig(num_grad_workers=2, grad_communication="asynchronous",
            ...              max_policy_lag=1).grad_workers_config().max_grad_staleness
            1
        """
        if self.num_grad_workers < 1:
            raise ValueError(
                f"num_grad_workers={self.num_grad_workers} is invalid here; accepted: an int "
                f">= 1 (a config without gradient workers has no gradient-worker settings)"
            )
        return GradientWorkersConfig(
            num_grad_workers=self.num_grad_workers,
            max_restarts=self.max_restarts,
            communication=self.grad_communication,
            decentralized=self.decentralized,
            compress=self.grad_compress,
            worker_resources=self.grad_worker_resources,
            num_collectors=self.num_collectors,
            frames_per_batch=self.frames_per_gradient(),
            grads_per_step=self.grads_per_step,
            max_grad_staleness=self._grad_staleness_bound(),
            preemption=self.preemption,
            seed=self.seed,
            timeout_s=float(self.batch_timeout_s),
            actor_start_timeout_s=float(self.actor_start_timeout_s),
            placement=self.placement,
        )

    def _grad_staleness_bound(self) -> int | None:
        if self.grad_communication != "asynchronous":
            return None
        bounds = [b for b in (self.max_grad_staleness, self.max_policy_lag) if b is not None]
        return min(bounds) if bounds else None

    @property
    def grad_mode(self) -> str:
        """``"synchronous"``, ``"asynchronous"`` or ``"decentralized"`` (gradient workers' mode)."""
        return "decentralized" if self.decentralized else self.grad_communication

    def _workers_per_update(self) -> int:
        return 1 if self.grad_communication == "asynchronous" else max(1, self.num_grad_workers)

    def frames_per_gradient(self) -> int:
        """Frames one gradient worker collects for one gradient.

        ``frames_per_batch / num_grad_workers`` for synchronous (and decentralized)
        gradients, averaged into one update; ``frames_per_batch`` for asynchronous
        ones, each an update of its own; ``frames_per_batch`` without gradient workers.
        """
        return self.frames_per_batch // self._workers_per_update()

    def replay_location(self) -> str:
        """Where an off-policy run's replay buffer lives: ``"driver"`` or ``"ray"``.

        ``buffer_location`` itself, or for ``"auto"``: ``"ray"`` when a learner group
        samples it (``num_learners > 0``, the runs that need it), else ``"driver"``.

        Example:
            >>> SchemeConfig(num_learners=2).replay_location()
            'ray'
            >>> SchemeConfig(num_learners=2, buffer_location="driver").replay_location()
            'driver'
        """
        if self.buffer_location != "auto":
            return self.buffer_location
        return "ray" if self.num_learners else "driver"
