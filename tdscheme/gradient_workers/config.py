"""``GradientWorkersConfig`` (how many gradient workers, how they communicate) and the worker spec."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tdscheme.stragglers import PreemptionConfig
from tdscheme.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    invalid,
)

__all__ = ["COMMUNICATIONS", "GradientWorkerSpec", "GradientWorkersConfig", "check_mode_rules"]

#: The accepted values of ``GradientWorkersConfig.communication``.
COMMUNICATIONS = ("synchronous", "asynchronous")


@dataclasses.dataclass
class GradientWorkersConfig:
    """How gradient workers collect, compute gradients and share updates.

    Each gradient worker is a Ray actor with its own copy of the learner and its
    own ``num_collectors`` torchrl collectors; it collects ``frames_per_batch``
    frames and computes one gradient on them per request.

    Args:
        num_grad_workers: gradient worker actors, ``>= 1``.
        communication: ``"synchronous"`` (one gradient per worker per step,
            averaged by frame count, applied once) or ``"asynchronous"`` (A3C: each
            gradient applied as it arrives, fresh weights back to its sender only).
        decentralized: with ``"synchronous"``, the workers all-reduce their
            gradients over a torch.distributed gloo group and each applies the same
            update; the driver only coordinates. Not allowed with ``"asynchronous"``.
        compress: lz4-compress gradients and weights crossing Ray.
        worker_resources: Ray options of each gradient worker actor, e.g.
            ``{"num_cpus": 1}`` (the default) or ``{"num_cpus": 1, "num_gpus": 0.5}``.
        num_collectors: torchrl collectors each gradient worker steps, ``>= 1``.
        frames_per_batch: frames one gradient worker collects for one gradient,
            split evenly over its collectors (so a multiple of ``num_collectors``).
        grads_per_step: asynchronous only: gradients received per :meth:`step`
            (``None``: ``num_grad_workers``).
        max_grad_staleness: asynchronous only: a gradient computed on weights more
            than this many learner versions old is dropped and counted
            (``None``: never dropped).
        preemption: centralized synchronous only: once ``fraction_workers`` of the
            workers delivered and their gradients cover ``fraction_samples`` of the
            step's frames, the step stops waiting; a straggler's gradient arrives
            later, computed on old weights, and is dropped and counted. A dict or a
            :class:`~tdscheme.collectors.PreemptionConfig`; ``None`` waits for all.
        seed: base seed; each worker (and each of its restarts) gets its own.
        max_restarts: times each worker may be recreated after dying (or hanging).
        timeout_s: longest wait for a gradient. Centralized: a worker silent this
            long after its request is declared hung, killed and rebuilt (a restart);
            decentralized: a step that does not finish in it is a ``TimeoutError``
            naming the silent workers.
        actor_start_timeout_s: a worker Ray has not placed or built this long after
            it was asked for is an error (see :mod:`tdscheme.runtime.placement`).
        placement: ``"check"``: requests beyond the cluster are refused at once;
            ``"wait"``: no such check (an autoscaling cluster), the workers wait
            ``actor_start_timeout_s`` to be placed.
        collector_kwargs: extra keyword arguments for every torchrl collector.
        collector_class: the collector class each worker steps: ``None`` (tdscheme's
            :class:`~tdscheme.rollout.lean.LeanCollector`, torchrl's ``Collector`` with a
            leaner rollout and the same frames), ``"single"`` (torchrl's ``Collector``)
            or a single-process torchrl ``BaseCollector`` subclass.

    Raises:
        ValueError: a value out of range, an unknown ``communication``, an option
            given to a mode that does not use it, or ``decentralized=True`` with
            ``communication="asynchronous"``.
        TypeError: ``worker_resources`` or ``collector_kwargs`` is not a dict, or
            ``collector_class`` is not a collector class.

    Example:
        >>> cfg = GradientWorkersConfig(num_grad_workers=2, communication="asynchronous")
        >>> cfg.grads_per_step_or_default(), cfg.remote_options()
        (2, {'num_cpus': 1})
        >>> GradientWorkersConfig(communication="asynchronous", decentralized=True)
        Traceback (most recent call last):
        ...
        ValueError: decentralized=True is invalid with communication='asynchronous'; accepted: \
decentralized=False, or communication='synchronous' (an all-reduce is a synchronous step)
    """

    num_grad_workers: int = 2
    communication: str = "synchronous"
    decentralized: bool = False
    compress: bool = False
    worker_resources: Mapping[str, Any] | None = None
    num_collectors: int = 1
    frames_per_batch: int = 200
    grads_per_step: int | None = None
    max_grad_staleness: int | None = None
    preemption: Mapping[str, float] | PreemptionConfig | None = None
    seed: int | None = None
    max_restarts: int = 3
    timeout_s: float = 300.0
    actor_start_timeout_s: float = 120.0
    placement: str = "check"
    collector_kwargs: Mapping[str, Any] | None = None
    collector_class: Any = None

    def __post_init__(self) -> None:
        check_int("num_grad_workers", self.num_grad_workers, minimum=1)
        check_int("num_collectors", self.num_collectors, minimum=1)
        check_int("frames_per_batch", self.frames_per_batch, minimum=1)
        check_int("max_restarts", self.max_restarts, minimum=0)
        check_choice("communication", self.communication, COMMUNICATIONS)
        check_bool("decentralized", self.decentralized)
        check_bool("compress", self.compress)
        if self.frames_per_batch % self.num_collectors:
            raise invalid(
                "frames_per_batch",
                self.frames_per_batch,
                "a multiple of num_collectors (each collector gets an equal share)",
                context=f"num_collectors={self.num_collectors}",
            )
        check_positive_number("timeout_s", self.timeout_s)
        check_positive_number("actor_start_timeout_s", self.actor_start_timeout_s)
        check_choice("placement", self.placement, ("check", "wait"))
        self.preemption = PreemptionConfig.from_arg(self.preemption)
        for name in ("worker_resources", "collector_kwargs"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(f"{name} must be a dict or None, got {value!r}")
        if self.collector_class is not None:
            self.collector_class = _single_process_collector_class(self.collector_class)
        check_mode_rules(
            communication=self.communication,
            decentralized=self.decentralized,
            grads_per_step=self.grads_per_step,
            max_grad_staleness=self.max_grad_staleness,
            preemption=self.preemption,
        )

    @property
    def mode(self) -> str:
        """``"synchronous"``, ``"asynchronous"`` or ``"decentralized"``."""
        return "decentralized" if self.decentralized else self.communication

    def grads_per_step_or_default(self) -> int:
        """Gradients per asynchronous step: ``grads_per_step`` or ``num_grad_workers``."""
        return self.num_grad_workers if self.grads_per_step is None else self.grads_per_step

    def remote_options(self) -> dict[str, Any]:
        """A fresh dict of Ray options for one gradient worker actor."""
        return {"num_cpus": 1} if self.worker_resources is None else dict(self.worker_resources)


@dataclasses.dataclass
class GradientWorkerSpec:
    """Everything one gradient worker is built from; small, kept by the driver for restarts.

    Attributes:
        env_factory: builds one torchrl env (called once per collector).
        policy_factory: builds the modules, e.g. ``{"actor": ..., "critic": ...}``.
        learner_factory: ``learner_factory(**modules)`` returns the worker's Learner
            (a single module is passed as ``actor=module``, as the Scheme does).
            Its ``policy`` drives the worker's collectors.
        num_collectors: torchrl collectors the worker steps.
        frames_per_batch: frames per gradient, split evenly over the collectors.
        compress: lz4-compress the gradients and weights the worker sends.
        collector_kwargs: extra keyword arguments for every collector.
        collector_class: the collectors' class (``None``: LeanCollector).

    Example:
        >>> from functools import partial
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets import get_preset
        >>> preset = get_preset("ppo-cartpole")
        >>> spec = GradientWorkerSpec(partial(make_env, "CartPole-v1"), preset.policy_factory(),
        ...                           preset.learner_factory(), num_collectors=2,
        ...                           frames_per_batch=100)
        >>> spec.frames_per_collector
        50
    """

    env_factory: Callable[[], Any]
    policy_factory: Callable[[], Any]
    learner_factory: Callable[..., Any]
    num_collectors: int = 1
    frames_per_batch: int = 200
    compress: bool = False
    collector_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    collector_class: type | None = None

    @property
    def frames_per_collector(self) -> int:
        """Frames each collector contributes to one gradient."""
        return self.frames_per_batch // self.num_collectors


def check_mode_rules(
    *,
    communication: str,
    decentralized: bool,
    grads_per_step: int | None,
    max_grad_staleness: int | None,
    preemption: PreemptionConfig,
    communication_name: str = "communication",
) -> None:
    """The rules of gradient-worker modes, shared by every config that sets them.

    ``communication_name`` is how the caller's config names the communication
    setting (``SchemeConfig`` calls it ``grad_communication``).

    Raises:
        ValueError: an option given to a mode that does not use it, naming both.
    """
    asynchronous = communication == "asynchronous"
    setting = f"{communication_name}={communication!r}"
    if decentralized and asynchronous:
        raise invalid(
            "decentralized", True,
            f"decentralized=False, or {communication_name}='synchronous' (an all-reduce is a "
            f"synchronous step)",
            context=setting,
        )  # fmt: skip
    check_int("grads_per_step", grads_per_step, minimum=1, optional=True)
    check_int("max_grad_staleness", max_grad_staleness, minimum=0, optional=True)
    for name, value in (
        ("grads_per_step", grads_per_step),
        ("max_grad_staleness", max_grad_staleness),
    ):
        if value is not None and not asynchronous:
            raise invalid(
                name, value, f"None, or {communication_name}='asynchronous'", context=setting
            )
    if preemption.enabled and (asynchronous or decentralized):
        raise invalid(
            "preemption", dataclasses.asdict(preemption),
            f"None, or centralized synchronous workers ({communication_name}='synchronous', "
            f"decentralized=False)",
            context=f"{setting}, decentralized={decentralized}",
        )  # fmt: skip


def _single_process_collector_class(collector_class: Any) -> type:
    """Resolves a user's ``collector_class``; a gradient worker steps one env per collector."""
    # imported here: building a config (the command's check of a preset) imports no torchrl
    from tdscheme.rollout.torchrl_names import is_multi_collector, resolve_collector_class

    resolved = resolve_collector_class(collector_class)
    if is_multi_collector(resolved):
        raise invalid(
            "collector_class", collector_class,
            "None (LeanCollector), 'single' or a single-process torchrl collector class "
            "(a gradient worker steps its collectors in its own process)",
        )  # fmt: skip
    return resolved
