"""RayCollectorConfig: every RayCollector setting, validated once, and the worker specs built from it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tdscheme.collectors.torchrl_compat.args import (
    check_weight_args,
    for_worker_collector,
    is_policy_service,
    with_env_creators,
)
from tdscheme.collectors.worker.buffer_writer import is_ray_replay_buffer
from tdscheme.collectors.worker.spec import WorkerSpec
from tdscheme.rollout.lean import LeanCollector
from tdscheme.runtime.ray_lease import check_init_keys
from tdscheme.runtime.ray_options import check_actor_options
from tdscheme.runtime.torchrl_names import default_exploration_type, resolve_collector_class
from tdscheme.stragglers import PreemptionConfig, check_sync_rules
from tdscheme.transport import TensorDictCodec
from tdscheme.validation import check_bool, check_int, check_positive_number, invalid

_DEVICE_ARGS = ("device", "storing_device", "env_device", "policy_device")


#: The share of a GPU each worker asks for on a machine with CUDA (torchrl's default).
DEFAULT_GPU_SHARE = 0.2


def default_remote_config(*, cuda_available: bool | None = None) -> dict[str, Any]:
    """Ray options for one collector actor when ``remote_configs`` is not given.

    torchrl's default: one CPU, and ``0.2`` of a GPU when CUDA is available on the
    driver (so five workers share a GPU). torchrl also reserves 2 GiB of Ray's
    ``memory`` resource per worker; tdscheme does not: it is a scheduling
    reservation, not a limit, and on a small machine it leaves workers waiting for
    memory Ray will never free (pass ``{"memory": ...}`` to reserve it).

    Args:
        cuda_available: whether the workers should get a GPU share; ``None``:
            ``torch.cuda.is_available()`` in this process, as torchrl.

    Example:
        >>> default_remote_config(cuda_available=False)
        {'num_cpus': 1}
        >>> default_remote_config(cuda_available=True)
        {'num_cpus': 1, 'num_gpus': 0.2}
    """
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    config: dict[str, Any] = {"num_cpus": 1}
    if cuda_available:
        config["num_gpus"] = DEFAULT_GPU_SHARE
    return config


@dataclasses.dataclass
class RayCollectorConfig:
    """All the settings of a :class:`~tdscheme.RayCollector` (see its docstring for each).

    The arguments torchrl's RayCollector documents keep their names and
    meaning (those about each worker's collector and its weight path: see
    :mod:`tdscheme.collectors.torchrl_compat.args`); ``max_policy_lag``, ``preemption``, ``compress``,
    ``prefetch_batches``, ``max_restarts``, ``seed`` and ``batch_timeout_s`` are
    tdscheme's additions.

    Raises:
        ValueError, TypeError: at construction, naming the bad argument, its
            value and what is accepted.

    Example:
        >>> from tdscheme.testing import make_env
        >>> cfg = RayCollectorConfig(make_env, frames_per_batch=100, num_collectors=2, sync=True)
        >>> [s.frames_per_batch for s in cfg.worker_specs()]
        [50, 50]
    """

    create_env_fn: Any
    policy: Any = None
    policy_factory: Callable[[], Any] | Sequence[Callable[[], Any]] | None = None
    frames_per_batch: int = 0
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
    prefetch_batches: int | None = None
    max_restarts: int = 3
    seed: int | None = None
    batch_timeout_s: float = 600.0
    actor_start_timeout_s: float = 120.0
    worker_stall_timeout_s: float | None = 120.0
    min_workers: int | None = None
    replay_buffer: Any = None
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
        self._check_ints()
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
        TensorDictCodec(self.compress)  # validates `compress`
        if self.prefetch_batches is None:
            on_policy = self.max_policy_lag == 0 or self.update_after_each_batch
            self.prefetch_batches = 0 if on_policy else 1

    def _check_ints(self) -> None:
        check_int("frames_per_batch", self.frames_per_batch, minimum=1)
        tf = self.total_frames
        if isinstance(tf, bool) or not isinstance(tf, int) or not (tf > 0 or tf == -1):
            raise invalid("total_frames", tf, "an int > 0, or -1 for no limit")
        check_int("num_collectors", self.num_collectors, minimum=1, optional=True)
        check_int("max_policy_lag", self.max_policy_lag, minimum=0, optional=True)
        check_int("prefetch_batches", self.prefetch_batches, minimum=0, optional=True)
        check_int("max_restarts", self.max_restarts, minimum=0)
        check_int("trajs_per_batch", self.trajs_per_batch, minimum=1, optional=True)
        check_int("num_workers_per_collector", self.num_workers_per_collector, minimum=1)
        mw = self.max_weight_update_interval
        if isinstance(mw, bool) or not isinstance(mw, int) or mw < -1:
            raise invalid("max_weight_update_interval", mw, "-1 (never forced) or an int >= 0")
        check_positive_number("batch_timeout_s", self.batch_timeout_s)
        check_positive_number("actor_start_timeout_s", self.actor_start_timeout_s)
        if self.worker_stall_timeout_s is not None:
            check_positive_number("worker_stall_timeout_s", self.worker_stall_timeout_s)
        check_int("min_workers", self.min_workers, minimum=1, optional=True)
        check_int("seed", self.seed, minimum=0, optional=True)
        for name in ("max_frames_per_traj", "init_random_frames"):
            check_int(name, getattr(self, name), minimum=-1, optional=True)
        for name in ("reset_at_each_iter", "split_trajs", "sync", "update_after_each_batch"):
            check_bool(name, getattr(self, name))
        if self.ray_init_config is not None:
            if not isinstance(self.ray_init_config, Mapping):
                raise invalid("ray_init_config", self.ray_init_config, "None or a dict")
            check_init_keys(self.ray_init_config)
        for name in ("remote_configs", "collector_kwargs"):
            value = getattr(self, name)
            for i, entry in enumerate(value if isinstance(value, (list, tuple)) else [value]):
                where = f"{name}[{i}]" if isinstance(value, (list, tuple)) else name
                if name == "remote_configs" and entry is not None:
                    check_actor_options(where, entry)
                elif entry is not None and not isinstance(entry, Mapping):
                    raise invalid(where, entry, "None, a dict, or a list of dicts")

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

    def _per_collector(self, name: str, value: Any) -> list[Any]:
        n = self.num_collectors
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(
                    f"{name} is a list of {len(value)} entries but there are {n} collectors"
                )
            return list(value)
        return [value] * n

    def remote_config_list(self) -> list[dict[str, Any]]:
        """Ray actor options, one dict per collector."""
        configs = (
            self.remote_configs if self.remote_configs is not None else default_remote_config()
        )
        return [dict(c) for c in self._per_collector("remote_configs", configs)]

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
            >>> from tdscheme.testing import make_env
            >>> RayCollectorConfig(make_env, frames_per_batch=256, num_collectors=2,
            ...                    init_random_frames=1000).random_frames_per_worker()
            512
        """
        share = max(0, self.init_random_frames) // self.num_collectors
        batch = self.frames_per_worker
        return -(-share // batch) * batch

    def worker_specs(self) -> list[WorkerSpec]:
        """One :class:`WorkerSpec` per collector."""
        kwargs_list = self._per_collector("collector_kwargs", self.collector_kwargs or {})
        devices = {name: self._per_collector(name, getattr(self, name)) for name in _DEVICE_ARGS}
        factories = self._per_collector("policy_factory", self.policy_factory)
        clients = (
            self.replay_buffer.clients(self.num_collectors)
            if self.replay_buffer is not None
            else [None] * self.num_collectors
        )
        policies = [self.policy] * self.num_collectors
        if is_policy_service(self.policy):  # each worker calls the server through a client
            policies = self.policy.clients(self.num_collectors)
        specs = []
        for i in range(self.num_collectors):
            kwargs = dict(kwargs_list[i])
            kwargs.update({name: devices[name][i] for name in _DEVICE_ARGS})
            kwargs.update(
                max_frames_per_traj=self.max_frames_per_traj,
                init_random_frames=self.random_frames_per_worker(),
                reset_at_each_iter=self.reset_at_each_iter,
                exploration_type=self.exploration_type,
                split_trajs=False,
            )
            if self.trajs_per_batch is not None:
                kwargs.setdefault("trajs_per_batch", self.trajs_per_batch)
                if self.replay_buffer is not None:  # flat whole trajectories, as written
                    kwargs.setdefault("traj_format", "cat")
            kwargs = for_worker_collector(
                kwargs, collector_class=self.collector_class, policy=policies[i],
                policy_factory=factories[i], trust_policy=self.trust_policy,
                no_cuda_sync=self.no_cuda_sync, pre_collect_hook=self.pre_collect_hook,
                post_collect_hook=self.post_collect_hook,
            )  # fmt: skip
            specs.append(
                WorkerSpec(
                    create_env_fn=self.create_env_fn[i],
                    policy=policies[i],
                    policy_factory=factories[i],
                    collector_class=self.collector_class,
                    collector_kwargs=kwargs,
                    frames_per_batch=self.frames_per_worker,
                    num_workers_per_collector=self.num_workers_per_collector,
                    compress=self.compress,
                    preemptible=self.preemption.enabled,
                    replay_buffer=clients[i],
                    max_policy_lag=self.max_policy_lag,
                )
            )
        return specs

    def for_added_workers(
        self,
        create_env_fn: Any,
        *,
        num_envs: int | None = None,
        policy: Any = None,
        collector_kwargs: Any = None,
        remote_configs: Any = None,
    ) -> RayCollectorConfig:
        """The settings of workers added to a running collector (``RayCollector.add_collectors``).

        Every setting is this config's, except the new env factories and the
        arguments given: ``num_envs`` (env copies per collector), ``policy``
        (replaces ``policy`` and ``policy_factory``), ``collector_kwargs`` and
        ``remote_configs``. With ``sync=True`` each new worker collects
        ``frames_per_worker`` frames, as the others do, and each takes the same
        share of ``init_random_frames`` as each of the others.

        Example:
            >>> from tdscheme.testing import make_env
            >>> cfg = RayCollectorConfig(make_env, frames_per_batch=100, num_collectors=2,
            ...                          sync=True, init_random_frames=40, device="cpu")
            >>> added = cfg.for_added_workers([make_env])
            >>> spec = added.worker_specs()[0]
            >>> spec.frames_per_batch, spec.collector_kwargs["device"]
            (50, 'cpu')
            >>> spec.collector_kwargs["init_random_frames"]  # 40 over 2 workers: 20, a batch: 50
            50
        """
        fns = list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else [create_env_fn]
        replaced: dict[str, Any] = {
            "create_env_fn": fns,
            "num_collectors": len(fns),
            "frames_per_batch": self.frames_per_worker * len(fns)
            if self.sync
            else self.frames_per_batch,
            "num_workers_per_collector": num_envs or self.num_workers_per_collector,
        }
        if self.init_random_frames > 0:  # each new worker takes the share each worker has
            share = self.init_random_frames // self.num_collectors
            replaced["init_random_frames"] = share * len(fns)
        if policy is not None:
            replaced.update(policy=policy, policy_factory=None)
        if collector_kwargs is not None:
            replaced["collector_kwargs"] = collector_kwargs
        if remote_configs is not None:
            replaced["remote_configs"] = remote_configs
        return dataclasses.replace(self, **replaced)

    def policy_module(self) -> nn.Module | None:
        """The driver-side policy module whose weights are pushed by default."""
        return self.policy if isinstance(self.policy, nn.Module) else None
