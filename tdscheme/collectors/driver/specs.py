"""The worker specs a RayCollector's settings give: what each worker actor is built from.

The driver builds one :class:`~tdscheme.collectors.worker.spec.WorkerSpec` per
worker from :class:`~tdscheme.collectors.RayCollectorConfig` (devices, the share of
``init_random_frames``, torchrl's arguments, the replay buffer's client) and hands it
to the actor; a rebuilt worker is built again from the same spec.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from tdscheme.collectors.torchrl_compat.args import for_worker_collector, is_policy_service
from tdscheme.collectors.worker.spec import WorkerSpec
from tdscheme.replay.ray_held import is_ray_replay_buffer

if TYPE_CHECKING:
    from tdscheme.collectors.config import RayCollectorConfig

__all__ = ["for_added_workers", "resource_arguments", "worker_specs"]

_DEVICE_ARGS = ("device", "storing_device", "env_device", "policy_device")


def resource_arguments(config: RayCollectorConfig) -> str:
    """The arguments that set the workers' Ray resources, as a placement error names them.

    With a Ray-held replay buffer, also its actor, which holds resources of its own
    (torchrl's default: 1 CPU) that the workers then cannot have.
    """
    text = (
        "num_collectors x remote_configs; Scheme: collector_resources; "
        "command: --num-collectors x --collector-resources"
    )
    if is_ray_replay_buffer(config.replay_buffer):
        text += (
            ". The Ray-held replay_buffer's actor holds resources of its own (torchrl's "
            "default: 1 CPU): build it with remote_config={'num_cpus': 0} if it only stores "
            "(RayReplayBuffer(..., **tdscheme.replay.ray_buffer_kwargs()) does)"
        )
    return text


def worker_specs(config: RayCollectorConfig) -> list[WorkerSpec]:
    """One :class:`WorkerSpec` per collector: what each worker actor is built from."""
    kwargs_list = config.per_collector("collector_kwargs", config.collector_kwargs or {})
    devices = {name: config.per_collector(name, getattr(config, name)) for name in _DEVICE_ARGS}
    factories = config.per_collector("policy_factory", config.policy_factory)
    clients = (
        config.replay_buffer.clients(config.num_collectors)
        if config.replay_buffer is not None
        else [None] * config.num_collectors
    )
    policies = [config.policy] * config.num_collectors
    if is_policy_service(config.policy):  # each worker calls the server through a client
        policies = config.policy.clients(config.num_collectors)
    specs = []
    for i in range(config.num_collectors):
        kwargs = dict(kwargs_list[i])
        kwargs.update({name: devices[name][i] for name in _DEVICE_ARGS})
        kwargs.update(
            max_frames_per_traj=config.max_frames_per_traj,
            init_random_frames=config.random_frames_per_worker(),
            reset_at_each_iter=config.reset_at_each_iter,
            exploration_type=config.exploration_type,
            split_trajs=False,
        )
        if config.trajs_per_batch is not None:
            kwargs.setdefault("trajs_per_batch", config.trajs_per_batch)
            if config.replay_buffer is not None:  # flat whole trajectories, as written
                kwargs.setdefault("traj_format", "cat")
        kwargs = for_worker_collector(
            kwargs, collector_class=config.collector_class, policy=policies[i],
            policy_factory=factories[i], trust_policy=config.trust_policy,
            no_cuda_sync=config.no_cuda_sync, pre_collect_hook=config.pre_collect_hook,
            post_collect_hook=config.post_collect_hook,
        )  # fmt: skip
        specs.append(
            WorkerSpec(
                create_env_fn=config.create_env_fn[i],
                policy=policies[i],
                policy_factory=factories[i],
                collector_class=config.collector_class,
                collector_kwargs=kwargs,
                frames_per_batch=config.frames_per_worker,
                num_workers_per_collector=config.num_workers_per_collector,
                compress=config.compress,
                preemptible=config.preemption.enabled,
                replay_buffer=clients[i],
                max_policy_lag=config.max_policy_lag,
                drop_nonfinite_frames=config.drop_nonfinite_frames,
            )
        )
    return specs


def for_added_workers(
    config: RayCollectorConfig,
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
        >>> from tdscheme.collectors import RayCollectorConfig
        >>> from tdscheme.testing import make_env
        >>> cfg = RayCollectorConfig(make_env, frames_per_batch=100, num_collectors=2,
        ...                          sync=True, init_random_frames=40, device="cpu")
        >>> added = for_added_workers(cfg, [make_env])
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
        "frames_per_batch": config.frames_per_worker * len(fns)
        if config.sync
        else config.frames_per_batch,
        "num_workers_per_collector": num_envs or config.num_workers_per_collector,
    }
    if config.init_random_frames > 0:  # each new worker takes the share each worker has
        share = config.init_random_frames // config.num_collectors
        replaced["init_random_frames"] = share * len(fns)
    if policy is not None:
        replaced.update(policy=policy, policy_factory=None)
    if collector_kwargs is not None:
        replaced["collector_kwargs"] = collector_kwargs
    if remote_configs is not None:
        replaced["remote_configs"] = remote_configs
    return dataclasses.replace(config, **replaced)
