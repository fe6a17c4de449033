"""SchemeConfig: how a Scheme distributes collection and, optionally, gradient computation."""

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
    """How a :class:`Scheme` distributes collection and, optionally, gradient computation.

    With ``num_grad_workers=0`` (the default) the driver trains one Learner on the
    batches of ``num_collectors`` collector workers. With ``num_grad_workers > 0``
    each gradient worker (a Ray actor) steps its own ``num_collectors`` collectors,
    computes gradients with its own copy of the learner, and the settings of the
    collector workers (``sync``, ``max_policy_lag``, ``prefetch_batches``,
    ``weight_push_interval``, ``compress``, ``collector_resources``) are not used.

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
            still answer; with gradient workers: the longest wait for a gradient.
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
accepted: decentralized=False, or grad_communication='synchronous'
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
    grad_communication: str = dataclasses.field(
        default="synchronous", metadata={"choices": GRAD_COMMUNICATIONS}
    )
    decentralized: bool = False
    grad_compress: bool = False
    grad_worker_resources: Mapping[str, Any] | None = None
    grads_per_step: int | None = None
    max_grad_staleness: int | None = None

    def __post_init__(self) -> None:
        _check_int("num_collectors", self.num_collectors, 1)
        _check_int("frames_per_batch", self.frames_per_batch, 1)
        _check_int("weight_push_interval", self.weight_push_interval, 1)
        _check_int("num_grad_workers", self.num_grad_workers, 0)
        _check_int("max_policy_lag", self.max_policy_lag, 0, optional=True)
        _check_int("prefetch_batches", self.prefetch_batches, 0, optional=True)
        _check_int("seed", self.seed, 0, optional=True)
        _check_int("grads_per_step", self.grads_per_step, 1, optional=True)
        _check_int("max_grad_staleness", self.max_grad_staleness, 0, optional=True)
        for name in ("sync", "compress", "decentralized", "grad_compress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; accepted: True or False"
                )
        if self.grad_communication not in GRAD_COMMUNICATIONS:
            raise ValueError(
                f"grad_communication={self.grad_communication!r} is invalid; accepted: "
                f"{', '.join(map(repr, GRAD_COMMUNICATIONS))}"
            )
        if self.preemption is not None:
            PreemptionConfig.from_arg(self.preemption)  # validates it
        self._check_gradient_workers()
        if self.num_grad_workers == 0:
            self._check_collectors()
        bt = self.batch_timeout_s
        if isinstance(bt, bool) or not isinstance(bt, (int, float)) or not bt > 0:
            raise ValueError(f"batch_timeout_s={bt!r} is invalid; accepted: a number > 0")
        for name in ("collector_resources", "ray_init_config", "grad_worker_resources"):
            value = getattr(self, name)
            kinds = (Mapping, list, tuple) if name == "collector_resources" else Mapping
            if value is not None and not isinstance(value, kinds):
                raise ValueError(
                    f"{name}={value!r} is invalid; accepted: None or a dict of Ray options"
                )

    def _check_collectors(self) -> None:
        if self.sync and self.frames_per_batch % self.num_collectors:
            raise ValueError(
                f"frames_per_batch={self.frames_per_batch} is invalid with sync=True and "
                f"num_collectors={self.num_collectors}; accepted: a multiple of num_collectors"
            )
        if self.preemption is not None and not self.sync:
            raise ValueError(
                f"preemption={dict(self.preemption)!r} is invalid with sync=False; "
                f"accepted: None, or set sync=True"
            )

    def _check_gradient_workers(self) -> None:
        asynchronous = self.grad_communication == "asynchronous"
        if self.decentralized and asynchronous:
            raise ValueError(
                "decentralized=True is invalid with grad_communication='asynchronous'; "
                "accepted: decentralized=False, or grad_communication='synchronous'"
            )
        for name in ("grads_per_step", "max_grad_staleness"):
            if getattr(self, name) is not None and not asynchronous:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid with grad_communication="
                    f"{self.grad_communication!r}; accepted: None, or "
                    f"grad_communication='asynchronous'"
                )
        if self.num_grad_workers == 0:
            return
        if self.preemption is not None and self.grad_mode != "synchronous":
            raise ValueError(
                f"preemption={dict(self.preemption)!r} is invalid with {self.grad_mode} "
                f"gradient workers; accepted: None, or synchronous centralized gradient "
                f"workers (grad_communication='synchronous', decentralized=False)"
            )
        if not asynchronous and self.frames_per_batch % self.num_grad_workers:
            raise ValueError(
                f"frames_per_batch={self.frames_per_batch} is invalid with "
                f"num_grad_workers={self.num_grad_workers} and synchronous gradients; "
                f"accepted: a multiple of num_grad_workers (each worker's share of an update)"
            )
        if self.frames_per_gradient() % self.num_collectors:
            raise ValueError(
                f"frames_per_batch={self.frames_per_batch} is invalid with "
                f"num_collectors={self.num_collectors} per gradient worker: each gradient's "
                f"{self.frames_per_gradient()} frames must split evenly over the collectors; "
                f"accepted: a multiple of {self.num_collectors * self._workers_per_update()}"
            )

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


def _check_int(name: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        accepted = f"an int >= {minimum}"
        raise ValueError(
            f"{name}={value!r} is invalid; accepted: {'None or ' if optional else ''}{accepted}"
        )
