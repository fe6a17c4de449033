"""RayCollectorConfig: every RayCollector setting, declared once and checked once.

The bottom of the collectors' room: every other module of it reads these settings,
and this module imports none of them (the worker specs built from the settings are
:mod:`~tdscheme.collectors.settings.specs`; torchrl's own arguments are translated in
:mod:`~tdscheme.collectors.settings.torchrl_args`). Each bad value is a clear error
naming the argument, the value and what is accepted, raised when the config is built,
before any actor starts.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from tdscheme.collectors.settings.torchrl_args import (
    check_weight_args,
    is_policy_service,
    with_env_creators,
)
from tdscheme.replay.ray_held import is_ray_replay_buffer
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import default_exploration_type, resolve_collector_class
from tdscheme.runtime.ray_lease import check_init_keys
from tdscheme.runtime.ray_options import check_actor_options
from tdscheme.stragglers import PreemptionConfig, check_sync_rules
from tdscheme.transport import TensorDictCodec
from tdscheme.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    invalid,
)


@dataclasses.dataclass
class RayCollectorConfig:
    """Every setting of a :class:`~tdscheme.RayCollector`, declared once and checked once.

    The fields are the collector's arguments (its signature is built from them; a test
    holds them and the Args below together). torchrl's keep their names and meaning;
    ``max_policy_lag``, ``preemption``, ``compress``, ``prefetch_batches``, ``seed`` and
    the fault settings (``max_restarts``, ``batch_timeout_s``, ``actor_start_timeout_s``,
    ``worker_stall_timeout_s``, ``min_workers``) are tdscheme's additions.

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
            default ``{"num_cpus": 1}``, no GPU unless asked for (torchrl adds 0.2 of
            a GPU with CUDA; :func:`~tdscheme.collectors.settings.specs.default_remote_config`).
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
        dedup_obs: ``True``: ``("next", key)`` leaves of >= 1 KiB per frame cross Ray as
            their differences from ``key``, rebuilt bit for bit (``stats()["dedup_keys"]``);
            ``"auto"``: only from workers on another node than the driver's; ``False``: whole.
        prefetch_batches: requests each worker keeps in flight while the consumer
            holds a batch, so env stepping overlaps training (bounded, so the
            object store cannot fill up). Default 1, or 0 when ``max_policy_lag=0``
            or ``update_after_each_batch`` asks for on-policy data.
        max_restarts: times a worker that died, hung, or whose env or policy raised
            is rebuilt before a ``WorkerError``.
        seed: seeds worker ``i`` distinctly and reproducibly (also see :meth:`set_seed`).
        batch_timeout_s: raise ``TimeoutError`` if no batch arrives for this long
            while every worker still answers pings.
        actor_start_timeout_s: a worker Ray has not placed (or whose constructor
            has not returned) this long after it was asked for is a
            :class:`~tdscheme.errors.PlacementError`; requests the
            cluster could never satisfy (``num_collectors`` x ``remote_configs`` past
            its total resources) are one at once (:mod:`tdscheme.runtime.placement`).
        placement: ``"check"`` (default): a request beyond the cluster's resources
            is refused at once; ``"wait"``: no such check, for an autoscaling
            cluster that adds nodes for pending requests: the workers may take
            ``actor_start_timeout_s`` (raise it) to be placed.
        worker_stall_timeout_s: a worker that makes no progress (env steps) for
            this long while it has a request is declared hung, killed and rebuilt
            like a dead one (its batch counted as lost); ``None``: no check. A new
            or rebuilt worker that has not replied yet may take ``actor_start_timeout_s``
            when that is longer (it may still be placed and built).
        min_workers: elastic collection (RLlib's ``ignore_env_runner_failures``):
            a worker that used up ``max_restarts`` is retired (logged and counted)
            and the others go on, as long as ``min_workers`` remain; ``None``:
            such a worker stops the run with a ``WorkerError``, unless its last actor
            hung (``worker_stall_timeout_s``) while another worker delivers frames: one
            that hangs at every rebuild is retired then, and the others go on.
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
        drop_nonfinite_frames: with ``replay_buffer``: a worker leaves out the
            frames holding NaN or inf (any floating-point entry) when it writes,
            counted as dropped (``frames_dropped``, the ledger's ``dropped``).
        replay_priority_fn: with a prioritized ``replay_buffer``: ``fn(frames, policy)``
            run in each worker on the frames it is about to write, with its policy; the
            result is written as their priorities (Ape-X's initial priorities, e.g.
            :class:`~tdscheme.replay.priorities.QLearningPriority`), so that new frames
            do not all come in at the buffer's max priority. ``None``: the buffer's own
            ``priority_fn`` if it has one (:class:`~tdscheme.replay.sharded.ShardedReplayBuffer`).
        replay_n_step: with ``replay_buffer``: an :class:`~tdscheme.replay.n_step.NStep`;
            each worker writes n-step returns (``steps_to_next_obs`` beside them, which
            torchrl's TD(0) estimators read), holding each env's last ``n_steps`` steps
            until its next batch (booked as ``held_back`` in the ledger). ``None``: the
            buffer's own ``n_step`` if it has one, else one-step frames.
        trajs_per_batch: each worker's collector assembles whole trajectories
            (torchrl's argument); with a replay buffer each is written flat
            (``SliceSampler``-ready) and never cut: a trajectory that does not
            fit in the frame budget is discarded, and collection ends there.
        trust_policy, use_env_creator, no_cuda_sync, pre_collect_hook: torchrl's arguments
            about each worker's collector, with torchrl's meaning where tdscheme can
            keep it (see :mod:`tdscheme.collectors.torchrl_compat.args`).
        post_collect_hook, weight_updater, weight_sync_schemes, weight_recv_schemes: the
            same, about each worker's collector and its weight path.

    Raises:
        ValueError, TypeError: at construction, naming the bad argument, its
            value and what is accepted.

    Example:
        >>> from functools import partial
        >>> from tdscheme.envs import make_env
        >>> env_fn = partial(make_env, "CartPole-v1")
        >>> cfg = RayCollectorConfig(env_fn, frames_per_batch=100, num_collectors=2, sync=True)
        >>> cfg.num_collectors, cfg.frames_per_worker
        (2, 50)
    """

    create_env_fn: Any
    policy: Any = None
    _: dataclasses.KW_ONLY  # the rest by keyword, as torchrl's RayCollector takes them
    policy_factory: Callable[[], Any] | Sequence[Callable[[], Any]] | None = None
    frames_per_batch: int
    total_frames: int = -1
    device: Any = None
    storing_device: Any = None
    env_device: Any = None
    policy_device: Any = None
    max_frames_per_traj: int = -1
    init_random_frames: int = -1
    reset_at_each_iter: bool = False
    postproc: Callable | None = None
    split_trajs: bool = False
    exploration_type: Any = dataclasses.field(default_factory=default_exploration_type)
    collector_class: Any = None
    collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    num_workers_per_collector: int = 1
    sync: bool = False
    ray_init_config: Mapping[str, Any] | None = None
    remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    num_collectors: int | None = None
    update_after_each_batch: bool = False
    max_weight_update_interval: int = -1
    max_policy_lag: int | None = None
    preemption: Mapping[str, float] | PreemptionConfig | None = None
    compress: bool | Sequence[Any] = False
    dedup_obs: bool | str = "auto"
    prefetch_batches: int | None = None
    max_restarts: int = 3
    seed: int | None = None
    batch_timeout_s: float = 600.0
    actor_start_timeout_s: float = 120.0
    placement: str = "check"
    worker_stall_timeout_s: float | None = 120.0
    min_workers: int | None = None
    replay_buffer: Any = None
    drop_nonfinite_frames: bool = False
    replay_priority_fn: Callable[[Any, Any], Any] | None = None
    replay_n_step: Any = None
    trajs_per_batch: int | None = None
    # torchrl's arguments about each worker's collector and its weight path (torchrl_args.py)
    trust_policy: bool | None = None
    use_env_creator: bool = False
    no_cuda_sync: bool | None = None
    pre_collect_hook: Callable[[], None] | None = None
    post_collect_hook: Callable[[Any], None] | None = None
    weight_updater: Any = None
    weight_sync_schemes: Mapping[str, Any] | None = None
    weight_recv_schemes: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.exploration_type is None:  # as not given: torchrl's default
            self.exploration_type = default_exploration_type()
        _check_scalar_settings(self)
        check_weight_args(
            weight_updater=self.weight_updater,
            weight_sync_schemes=self.weight_sync_schemes,
            weight_recv_schemes=self.weight_recv_schemes,
        )
        env_fns = self._env_fns()
        if self.use_env_creator:
            env_fns = with_env_creators(env_fns)
        self.num_collectors = len(env_fns)
        self.create_env_fn = env_fns
        # no collector_class: tdscheme's LeanCollector (torchrl's Collector, leaner rollout)
        self.collector_class = (
            LeanCollector
            if self.collector_class is None
            else resolve_collector_class(self.collector_class)
        )
        self.preemption = PreemptionConfig.from_arg(self.preemption)
        check_sync_rules(
            frames_per_batch=self.frames_per_batch,
            num_collectors=self.num_collectors,
            sync=self.sync,
            preemption=self.preemption,
        )
        if self.policy is not None and self.policy_factory is not None:
            raise ValueError("pass either policy or policy_factory, not both")
        if is_policy_service(self.policy) and self.trust_policy is None:
            self.trust_policy = True  # torchrl's default: the workers get the server's clients
        if self.min_workers is not None and self.min_workers > self.num_collectors:
            raise invalid(
                "min_workers", self.min_workers, f"None or an int in [1, {self.num_collectors}]",
                context=f"num_collectors={self.num_collectors}",
            )  # fmt: skip
        if self.replay_buffer is not None and not is_ray_replay_buffer(self.replay_buffer):
            raise TypeError(
                f"replay_buffer={type(self.replay_buffer).__name__}(...) is a buffer in this "
                f"process, which remote workers cannot write into (they would fill copies); "
                f"accepted: a Ray-held torchrl buffer, RayReplayBuffer(...) or "
                f"ReplayBuffer(..., service_backend='ray')"
            )
        if self.replay_priority_fn is None:  # a buffer may say how its writes are prioritized
            self.replay_priority_fn = getattr(self.replay_buffer, "priority_fn", None)
        if self.replay_priority_fn is not None and (
            self.replay_buffer is None or not callable(self.replay_priority_fn)
        ):
            raise invalid(
                "replay_priority_fn", self.replay_priority_fn, "None, or fn(frames, policy) "
                "with a replay_buffer", context=f"replay_buffer={self.replay_buffer!r}",
            )  # fmt: skip
        self._check_n_step()
        TensorDictCodec(self.compress)  # validates `compress`
        if self.prefetch_batches is None:
            on_policy = self.max_policy_lag == 0 or self.update_after_each_batch
            self.prefetch_batches = 0 if on_policy else 1

    def _check_n_step(self) -> None:
        from tdscheme.replay.n_step import NStep

        if self.replay_n_step is None:  # a buffer may say how its writes are made
            self.replay_n_step = getattr(self.replay_buffer, "n_step", None)
        if self.replay_n_step is None:
            return
        context = f"replay_buffer={self.replay_buffer!r}, trajs_per_batch={self.trajs_per_batch}"
        if (
            not isinstance(self.replay_n_step, NStep)
            or self.replay_buffer is None
            or self.trajs_per_batch is not None
        ):
            raise invalid(
                "replay_n_step", self.replay_n_step, "None, or an NStep(n_steps, gamma) with a "
                "replay_buffer and no trajs_per_batch (whole trajectories keep one-step frames)",
                context=context,
            )  # fmt: skip

    def _env_fns(self) -> list[Any]:
        fns = self.create_env_fn
        if isinstance(fns, (list, tuple)):
            if not fns:
                raise ValueError("create_env_fn is an empty list; give one env factory or a list")
            if self.num_collectors is not None and len(fns) != self.num_collectors:
                raise ValueError(
                    f"create_env_fn has {len(fns)} entries but num_collectors="
                    f"{self.num_collectors}; give one factory per collector or a single factory"
                )
            fns = list(fns)
        else:
            fns = [fns] * (self.num_collectors or 1)
        for i, fn in enumerate(fns):
            if not callable(fn):
                raise TypeError(
                    f"create_env_fn[{i}]={fn!r} is not callable; accepted: a function returning "
                    f"a torchrl env (or a torchrl EnvBase)"
                )
        return fns

    def per_collector(self, name: str, value: Any) -> list[Any]:
        """``value`` for each collector: a list of one per collector, or one value for all."""
        n = self.num_collectors
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(
                    f"{name} is a list of {len(value)} entries but there are {n} collectors"
                )
            return list(value)
        return [value] * n

    @property
    def frames_per_worker(self) -> int:
        """Frames each worker collects per request."""
        if self.sync:
            return self.frames_per_batch // self.num_collectors
        return self.frames_per_batch

    def random_frames_per_worker(self) -> int:
        """Each worker's share of ``init_random_frames``, in whole batches of the worker's.

        torchrl's collectors collect random frames in whole batches (with a warning
        when ``init_random_frames`` is not a multiple of ``frames_per_batch``); the
        share is rounded up to that multiple here, so a worker does what it is asked.

        Example:
            >>> from functools import partial
            >>> from tdscheme.envs import make_env
            >>> env_fn = partial(make_env, "CartPole-v1")
            >>> RayCollectorConfig(env_fn, frames_per_batch=256, num_collectors=2,
            ...                    init_random_frames=1000).random_frames_per_worker()
            512
        """
        share = max(0, self.init_random_frames) // self.num_collectors
        batch = self.frames_per_worker
        return -(-share // batch) * batch

    def policy_module(self) -> nn.Module | None:
        """The driver-side policy module whose weights are pushed by default."""
        return self.policy if isinstance(self.policy, nn.Module) else None


def settings_signature() -> inspect.Signature:
    """``RayCollector``'s signature: ``self``, then every field of :class:`RayCollectorConfig`.

    Example:
        >>> list(settings_signature().parameters)[:4]
        ['self', 'create_env_fn', 'policy', 'policy_factory']
    """
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for field in dataclasses.fields(RayCollectorConfig):
        positional = field.name in ("create_env_fn", "policy")
        kind = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if positional
            else inspect.Parameter.KEYWORD_ONLY
        )
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = None  # built per collector (exploration_type: torchrl's default)
        else:
            default = inspect.Parameter.empty
        params.append(inspect.Parameter(field.name, kind, default=default, annotation=field.type))
    return inspect.Signature(params, return_annotation=None)


def _check_scalar_settings(config: RayCollectorConfig) -> None:
    """Checks the numbers, flags and option dicts of a ``RayCollectorConfig``.

    Raises:
        ValueError: a value out of its range (naming the argument).
        TypeError: a value of the wrong type (naming the argument).
    """
    check_int("frames_per_batch", config.frames_per_batch, minimum=1)
    tf = config.total_frames
    if isinstance(tf, bool) or not isinstance(tf, int) or not (tf > 0 or tf == -1):
        raise invalid("total_frames", tf, "an int > 0, or -1 for no limit")
    check_int("num_collectors", config.num_collectors, minimum=1, optional=True)
    check_int("max_policy_lag", config.max_policy_lag, minimum=0, optional=True)
    check_int("prefetch_batches", config.prefetch_batches, minimum=0, optional=True)
    check_int("max_restarts", config.max_restarts, minimum=0)
    check_int("trajs_per_batch", config.trajs_per_batch, minimum=1, optional=True)
    check_int("num_workers_per_collector", config.num_workers_per_collector, minimum=1)
    mw = config.max_weight_update_interval
    if isinstance(mw, bool) or not isinstance(mw, int) or mw < -1:
        raise invalid("max_weight_update_interval", mw, "-1 (never forced) or an int >= 0")
    check_positive_number("batch_timeout_s", config.batch_timeout_s)
    check_positive_number("actor_start_timeout_s", config.actor_start_timeout_s)
    if config.worker_stall_timeout_s is not None:
        check_positive_number("worker_stall_timeout_s", config.worker_stall_timeout_s)
    check_int("min_workers", config.min_workers, minimum=1, optional=True)
    check_int("seed", config.seed, minimum=0, optional=True)
    for name in ("max_frames_per_traj", "init_random_frames"):
        check_int(name, getattr(config, name), minimum=-1, optional=True)
    for name in ("reset_at_each_iter", "split_trajs", "sync", "update_after_each_batch"):
        check_bool(name, getattr(config, name))
    if not (isinstance(config.dedup_obs, bool) or config.dedup_obs == "auto"):
        raise invalid("dedup_obs", config.dedup_obs, "True, False or 'auto'")
    check_choice("placement", config.placement, ("check", "wait"))
    check_bool("drop_nonfinite_frames", config.drop_nonfinite_frames)
    if config.drop_nonfinite_frames and config.replay_buffer is None:
        raise invalid(
            "drop_nonfinite_frames", True, "False", context="replay_buffer=None (batches come "
            "to you: drop frames in your loop, or with LearnerConfig(drop_nonfinite_frames=True))",
        )  # fmt: skip
    if config.ray_init_config is not None:
        if not isinstance(config.ray_init_config, Mapping):
            raise invalid("ray_init_config", config.ray_init_config, "None or a dict")
        check_init_keys(config.ray_init_config)
    for name in ("remote_configs", "collector_kwargs"):
        value = getattr(config, name)
        for i, entry in enumerate(value if isinstance(value, (list, tuple)) else [value]):
            where = f"{name}[{i}]" if isinstance(value, (list, tuple)) else name
            if name == "remote_configs" and entry is not None:
                check_actor_options(where, entry)
            elif entry is not None and not isinstance(entry, Mapping):
                raise invalid(where, entry, "None, a dict, or a list of dicts")
