"""SchemeConfig: how a Scheme distributes collection (and, later, gradient computation)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tdscheme.collectors import PreemptionConfig

__all__ = ["GRAD_COMMUNICATIONS", "SchemeConfig"]

#: The accepted values of ``SchemeConfig.grad_communication``.
GRAD_COMMUNICATIONS = ("synchronous", "asynchronous")


@dataclasses.dataclass
class SchemeConfig:
    """How a :class:`Scheme` distributes collection (and, later, gradient computation).

    Args:
        num_collectors: collector workers (Ray actors), each stepping its own envs.
        frames_per_batch: frames per learner update. With ``sync=True`` each worker
            collects ``frames_per_batch / num_collectors`` of them; with ``sync=False``
            each batch comes whole from the first worker that finishes.
        sync: stack one rollout per worker into each batch (``True``) or train on
            each worker's batch as soon as it is ready (``False``).
        preemption: ``{"fraction_workers": a, "fraction_samples": b}`` (sync only):
            cut stragglers off once enough workers and frames are in.
        max_policy_lag: drop batches collected with weights more than this many
            pushes old; 0 is strictly on-policy (no overlap of collection and
            training); ``None``: no bound.
        prefetch_batches: requests each worker keeps in flight while the learner
            trains; ``None``: the collector's default (1, or 0 when
            ``max_policy_lag=0``).
        weight_push_interval: push the learner's weights to the workers every this
            many learner updates.
        compress: lz4-compress batches on the wire (``True``) or only the listed keys.
        collector_resources: Ray actor options per collector worker, e.g.
            ``{"num_cpus": 0.5}`` (one dict for all, or one per worker); ``None``:
            one CPU each.
        ray_init_config: ``ray.init`` arguments used only when Ray is not running;
            ``{"address": "auto"}`` joins a cluster.
        seed: seeds torch before the modules are built (reproducible initial
            weights) and each worker distinctly; ``None`` leaves them unseeded.
        batch_timeout_s: raise if no batch arrives for this long while the workers
            still answer.
        num_grad_workers: gradient workers, each with its own collectors and learner
            copy; reserved (only 0 is implemented yet).
        grad_communication: ``"synchronous"`` (average gradients, one update) or
            ``"asynchronous"`` (A3C-style); used when ``num_grad_workers > 0``.
        decentralized: all-reduce gradients between gradient workers instead of
            sending them to the driver; used when ``num_grad_workers > 0``.
        grad_compress: compress gradients on the wire; used when ``num_grad_workers > 0``.
        grad_worker_resources: Ray actor options per gradient worker.

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> SchemeConfig(num_collectors=2, frames_per_batch=4096).weight_push_interval
        1
        >>> SchemeConfig(num_collectors=0)
        Traceback (most recent call last):
        ...
        ValueError: num_collectors=0 is invalid; accepted: an int >= 1
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
    num_grad_workers: int = 0
    grad_communication: str = "synchronous"
    decentralized: bool = False
    grad_compress: bool = False
    grad_worker_resources: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _check_int("num_collectors", self.num_collectors, 1)
        _check_int("frames_per_batch", self.frames_per_batch, 1)
        _check_int("weight_push_interval", self.weight_push_interval, 1)
        _check_int("num_grad_workers", self.num_grad_workers, 0)
        _check_int("max_policy_lag", self.max_policy_lag, 0, optional=True)
        _check_int("prefetch_batches", self.prefetch_batches, 0, optional=True)
        _check_int("seed", self.seed, 0, optional=True)
        for name in ("sync", "compress", "decentralized", "grad_compress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; accepted: True or False"
                )
        if self.sync and self.frames_per_batch % self.num_collectors:
            raise ValueError(
                f"frames_per_batch={self.frames_per_batch} is invalid with sync=True and "
                f"num_collectors={self.num_collectors}; accepted: a multiple of num_collectors"
            )
        if self.preemption is not None:
            PreemptionConfig.from_arg(self.preemption)  # validates it
            if not self.sync:
                raise ValueError(
                    f"preemption={dict(self.preemption)!r} is invalid with sync=False; "
                    f"accepted: None, or set sync=True"
                )
        if self.grad_communication not in GRAD_COMMUNICATIONS:
            raise ValueError(
                f"grad_communication={self.grad_communication!r} is invalid; accepted: "
                f"{', '.join(map(repr, GRAD_COMMUNICATIONS))}"
            )
        bt = self.batch_timeout_s
        if isinstance(bt, bool) or not isinstance(bt, (int, float)) or not bt > 0:
            raise ValueError(f"batch_timeout_s={bt!r} is invalid; accepted: a number > 0")
        for name in ("collector_resources", "ray_init_config", "grad_worker_resources"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (Mapping, list, tuple)):
                raise ValueError(
                    f"{name}={value!r} is invalid; accepted: None or a dict of Ray options"
                )


def _check_int(name: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        accepted = f"an int >= {minimum}"
        raise ValueError(
            f"{name}={value!r} is invalid; accepted: {'None or ' if optional else ''}{accepted}"
        )
