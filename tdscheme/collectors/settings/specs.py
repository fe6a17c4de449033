"""What a collector worker is built from (:class:`WorkerSpec`), and what it returns (:class:`WorkerBatch`).

Both are small plain data, the messages between the driver and its workers: the driver
builds one spec per worker from a :class:`~tdscheme.collectors.settings.config.RayCollectorConfig`
(:func:`worker_specs`: devices, the share of ``init_random_frames``, torchrl's
arguments, the replay buffer's client) and keeps it to rebuild the worker after a
death; each ``CollectorWorker.collect`` call returns a batch record.

Example:
    >>> spec = WorkerSpec(create_env_fn=None, frames_per_batch=200)
    >>> spec.collector_class.__name__, spec.whole_trajectories
    ('LeanCollector', False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ray

from tdscheme.collectors.settings.config import RayCollectorConfig
from tdscheme.collectors.settings.torchrl_args import for_worker_collector, is_policy_service
from tdscheme.episodes import FinishedEpisodes
from tdscheme.replay.ray_held import is_ray_replay_buffer
from tdscheme.rollout.exploration import per_worker_policies
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import is_multi_collector
from tdscheme.transport import Payload
from tdscheme.transport.next_fold import MIN_FRAME_BYTES

__all__ = [
    "WorkerBatch",
    "WorkerSpec",
    "default_remote_config",
    "for_added_workers",
    "remote_configs",
    "resource_arguments",
    "worker_specs",
]


@dataclasses.dataclass
class WorkerSpec:
    """Everything a worker is built from; small, so the driver keeps it to rebuild a dead worker.

    Attributes:
        create_env_fn: env factory (or an env) for this worker.
        policy: the policy object sent to the worker (``None`` with ``policy_factory``
            or for a random policy).
        policy_factory: builds the policy inside the worker instead.
        collector_class: the torchrl collector class the worker wraps (default:
            :class:`~tdscheme.rollout.lean.LeanCollector`, torchrl's ``Collector``
            with a leaner rollout over plain gymnasium envs).
        collector_kwargs: extra keyword arguments for ``collector_class``; they
            override tdscheme's defaults
            (:func:`~tdscheme.runtime.torchrl_names.default_collector_kwargs`).
        frames_per_batch: frames the worker returns per ``collect`` call.
        num_workers_per_collector: env copies handed to ``collector_class``.
        compress: the transport codec's ``compress`` argument.
        dedup_obs: fold ``("next", obs)`` leaves on the wire (:mod:`tdscheme.transport.next_fold`):
            ``True``, ``False``, or ``"auto"``: when the worker's node is not ``driver_node``.
        driver_node: the driver's Ray node id.
        preemptible: step the collector one env step at a time so that a
            ``preempt`` request cuts a batch short at the next step boundary.
        replay_buffer: a client of a Ray-held torchrl replay buffer: the worker
            writes its stamped frames into it and returns only counts.
        max_policy_lag: with a replay buffer, frames collected with weights more
            than this many versions older than the newest the worker received
            are not written (they are dropped and counted).
        drop_nonfinite_frames: with a replay buffer, frames holding NaN or inf are
            not written (dropped and counted).
        priority_fn: with a replay buffer, ``fn(frames, policy)``: the priorities
            written with the frames (:mod:`tdscheme.replay.priorities`).
        n_step: with a replay buffer, the n-step returns written
            (:class:`~tdscheme.replay.n_step.NStep`; ``None``: one-step frames).
    """

    create_env_fn: Any
    policy: Any = None
    policy_factory: Callable[[], Any] | None = None
    collector_class: type = LeanCollector
    collector_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    frames_per_batch: int = 1000
    num_workers_per_collector: int = 1
    compress: bool | list[Any] = False
    dedup_obs: bool | str = "auto"
    driver_node: str | None = None
    preemptible: bool = False
    replay_buffer: Any = None
    max_policy_lag: int | None = None
    drop_nonfinite_frames: bool = False
    priority_fn: Callable[[Any, Any], Any] | None = None
    n_step: Any = None

    def fold_next_bytes(self) -> int | None:
        """The codec's ``fold_next_bytes`` in this worker (called in its process): a node
        of its own sends ``("next", obs)`` folded under ``dedup_obs="auto"``, because bytes
        cross the network there; on the driver's node they cross shared memory, where
        folding gains no rate (``benchmarks/results/fast_paths.md``, stop 58) and moves the
        rebuild onto the driver's core, the learner's. A worker built outside Ray (in the
        user's process) sends nothing across a node, and starts no Ray to find that out."""
        fold = self.dedup_obs is True or (
            self.dedup_obs == "auto"
            and ray.is_initialized()
            and ray.get_runtime_context().get_node_id() != self.driver_node
        )
        return MIN_FRAME_BYTES if fold else None

    @property
    def whole_trajectories(self) -> bool:
        """Whether the collector yields whole trajectories (torchrl's ``trajs_per_batch``)."""
        return self.collector_kwargs.get("trajs_per_batch") is not None

    @property
    def runs_subprocesses(self) -> bool:
        """Whether the worker's collector runs its envs in subprocesses (asked to shut down)."""
        return self.num_workers_per_collector > 1 or is_multi_collector(self.collector_class)


@dataclasses.dataclass
class WorkerBatch:
    """What one ``collect`` call returns to the driver.

    Attributes:
        worker_id: the worker that collected it.
        batch_id: the request it answers.
        policy_version: weights version the frames were collected with.
        frames: number of valid frames (with a replay buffer: frames written).
        preempted: the batch was cut short by a preemption request.
        payload: the encoded TensorDict (``None`` when written to a replay buffer).
        collect_s: seconds spent stepping.
        encode_s: seconds spent encoding (or writing to the replay buffer).
        frames_discarded: frames collected but not written: past the request's
            frame budget, or a trajectory that did not fit in it.
        frames_dropped: frames not written because they were collected with
            weights more than ``max_policy_lag`` versions older than the newest.
        restarts: the worker's restart count when it collected the batch (set by the driver).
        next_traj_id: the id the worker's collector gives its next trajectory (``None``
            when the collector does not say): a rebuilt worker starts from the largest.
        episodes: with a replay buffer, the episodes that ended in the frames written
            (their returns, as the driver reads them from a batch it receives).
        env_config_version: the oldest env-config version an env copy of the worker
            runs once the batch is collected.
        reset_steps: env steps in which a copy was reset, not stepped (a one-call
            ``NEXT_STEP`` vector env): padding in the batch, no transition.
        env_config_refused: env configs the env raised on when applied since the last
            batch, ``(version, version gone back to, error)`` each.
        frames_held_back: frames collected but held for their n-step returns (``NStep``):
            the steps the worker holds after this batch less those it held before.
    """

    worker_id: int
    batch_id: int
    policy_version: int
    frames: int
    preempted: bool
    payload: Payload | None
    collect_s: float
    encode_s: float
    frames_discarded: int = 0
    frames_dropped: int = 0
    restarts: int = 0
    next_traj_id: int | None = None
    episodes: FinishedEpisodes | None = None
    env_config_version: int = 0
    reset_steps: int = 0
    env_config_refused: tuple[tuple[int, int, str], ...] = ()
    frames_held_back: int = 0

    @property
    def stepped(self) -> int:
        """Every frame the worker stepped for the batch, whatever became of it."""
        return (
            self.frames + self.frames_discarded + self.frames_dropped + self.reset_steps
            + self.frames_held_back
        )


def default_remote_config() -> dict[str, Any]:
    """Ray options for one collector actor when ``remote_configs`` is not given: one CPU.

    No GPU unless you ask for one (``remote_configs={"num_cpus": 1, "num_gpus": ...}``):
    the workers run the policy on the CPU with CPU weights wherever the learner trains,
    so a GPU share would only keep the GPU from the learner (torchrl's RayCollector
    gives each worker 0.2 of a GPU when CUDA is available). torchrl also reserves 2 GiB
    of Ray's ``memory`` resource per worker; tdscheme does not: it is a scheduling
    reservation, not a limit, and on a small machine it leaves workers waiting for
    memory Ray will never free (pass ``{"memory": ...}`` to reserve it).

    Example:
        >>> default_remote_config()
        {'num_cpus': 1}
    """
    return {"num_cpus": 1}


def remote_configs(config: RayCollectorConfig) -> list[dict[str, Any]]:
    """Ray actor options, one dict per collector (``remote_configs``, or the default)."""
    configs = (
        config.remote_configs if config.remote_configs is not None else default_remote_config()
    )
    return [dict(c) for c in config.per_collector("remote_configs", configs)]


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
    # a copy each where the policy explores per worker (Ape-X's epsilons): rollout/exploration.py
    policies = per_worker_policies(config.policy, config.num_collectors)
    if is_policy_service(config.policy):  # each worker calls the server through a client
        policies = config.policy.clients(config.num_collectors)
    driver_node = ray.get_runtime_context().get_node_id()
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
                dedup_obs=config.dedup_obs,
                driver_node=driver_node,
                preemptible=config.preemption.enabled,
                replay_buffer=clients[i],
                max_policy_lag=config.max_policy_lag,
                drop_nonfinite_frames=config.drop_nonfinite_frames,
                priority_fn=config.replay_priority_fn,
                n_step=config.replay_n_step,
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
        >>> from functools import partial
        >>> from tdscheme.envs import make_env
        >>> env_fn = partial(make_env, "CartPole-v1")
        >>> cfg = RayCollectorConfig(env_fn, frames_per_batch=100, num_collectors=2,
        ...                          sync=True, init_random_frames=40, device="cpu")
        >>> added = for_added_workers(cfg, [env_fn])
        >>> spec = worker_specs(added)[0]
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
