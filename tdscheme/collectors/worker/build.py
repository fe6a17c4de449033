"""Building the torchrl collector a collector worker wraps, and fixing what torchrl leaves.

Runs in the worker's process (never the driver's): the env is built here, where it
will be stepped.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdscheme.collectors.worker.checks import check_policy_keys
from tdscheme.collectors.worker.spec import WorkerSpec
from tdscheme.rollout.lean import LeanCollector
from tdscheme.runtime.torchrl_names import (
    default_collector_kwargs,
    is_multi_collector,
    takes_argument,
    takes_trajectory_pool,
    trajectory_pool,
)

__all__ = ["build_collector", "fast_path", "writable_carrier"]


def build_collector(
    spec: WorkerSpec, worker_id: int, first_traj_id: int = 0, frames_done: int = 0
) -> Any:
    """The torchrl collector a worker wraps, built from its spec in the worker's process.

    One env built from the factory (its keys checked against the policy's first),
    or a list of factories for a multi-process collector; torchrl's defaults for the
    class, the spec's collector arguments over them; a rebuilt worker's trajectory
    ids start past its earlier incarnations', and its frame count goes on from
    theirs (``frames_done``), so it takes random actions only for what they left of
    ``init_random_frames`` and its checkpoints hold the whole count; a preemptible
    worker steps one env step per iteration, so the driver can cut it off at any step.
    """
    env = spec.create_env_fn
    if spec.num_workers_per_collector > 1 or is_multi_collector(spec.collector_class):
        env = [spec.create_env_fn] * spec.num_workers_per_collector
    elif callable(env) and not isinstance(env, torch.nn.Module):
        env = env()
        check_policy_keys(env, spec.policy)  # before torchrl runs the policy on it
    kwargs = default_collector_kwargs(spec.collector_class)
    if takes_argument(spec.collector_class, "worker_idx"):
        kwargs["worker_idx"] = worker_id  # as torchrl's RayCollector: a receiver's rank
    kwargs.update(spec.collector_kwargs)  # the user's values win
    if spec.policy_factory is not None:
        kwargs["policy_factory"] = spec.policy_factory
    if first_traj_id and takes_trajectory_pool(spec.collector_class):
        # a rebuilt worker: its trajectory ids go on past its previous incarnation's
        kwargs.setdefault("traj_pool", trajectory_pool(first_traj_id))
    multi = isinstance(env, list)  # its sub-collectors count their own frames
    if multi and frames_done and (kwargs.get("init_random_frames") or 0) > 0:
        left = max(0, kwargs["init_random_frames"] - frames_done)
        kwargs["init_random_frames"] = left - left % spec.frames_per_batch
    frames = spec.frames_per_batch
    if spec.preemptible:
        # One env step per iteration; the batch is assembled step by step.
        frames = _env_batch_numel(env)
    collector = spec.collector_class(
        env, spec.policy, frames_per_batch=frames, total_frames=-1, **kwargs
    )
    if frames_done and not multi:  # as torchrl's own load_state_dict restores it
        collector._frames = frames_done
    return collector


def fast_path(collector: Any) -> bool | str:
    """``True`` when ``collector`` runs tdscheme's lean rollout, else why torchrl's rollout runs.

    Example:
        >>> from torchrl.collectors import Collector
        >>> fast_path(Collector.__new__(Collector))
        "collector_class=Collector: tdscheme's lean rollout runs only in its default LeanCollector"
    """
    if not isinstance(collector, LeanCollector):
        return (
            f"collector_class={type(collector).__name__}: tdscheme's lean rollout runs only "
            "in its default LeanCollector"
        )
    return True if collector.lean_reason is None else f"torchrl's rollout: {collector.lean_reason}"


def _env_batch_numel(env: Any) -> int:
    if isinstance(env, list):
        return len(env)
    batch_size = getattr(env, "batch_size", torch.Size([]))
    return max(1, torch.Size(batch_size).numel())


def writable_carrier(collector: Any) -> None:
    """Gives a torchrl collector's carrier its own memory where an entry is expanded.

    torchrl's ``Collector.reset()`` writes the env's reset output into the carrier
    in place; torchrl's EnvPool wrapper (``MultiThreadedEnv``) starts it with an
    expanded observation (stride 0), which cannot be written in place ("more than
    one element of the written-to tensor refers to a single memory location").
    """
    carrier = getattr(collector, "_carrier", None)
    if not isinstance(carrier, TensorDictBase):
        return
    leaves = carrier.values(include_nested=True, leaves_only=True)
    if any(isinstance(v, torch.Tensor) and v.numel() > 1 and 0 in v.stride() for v in leaves):
        collector._carrier = carrier.clone()
