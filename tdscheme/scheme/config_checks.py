"""The rules of :class:`~tdscheme.scheme.config.SchemeConfig` that tie several fields together.

Each check raises ``ValueError`` naming the field, its value, what is accepted and
the setting that makes it so.
"""

from __future__ import annotations

from typing import Any

from tdscheme.validation import invalid

#: a SchemeConfig (not imported: the config imports these checks)
SchemeConfig = Any

__all__ = ["check_async_learner", "check_gradient_worker_batches", "check_learner_group"]


def check_async_learner(config: SchemeConfig) -> None:
    """IMPALA / APPO take first-ready batches from the driver's collector, never fresh weights."""
    why = "async_learner=True (the learner takes first-ready batches, never fresh weights)"
    if config.sync or config.num_grad_workers:
        name = "sync" if config.sync else "num_grad_workers"
        accepted = "False" if name == "sync" else "0"
        raise invalid(name, getattr(config, name), accepted, context=why)
    for name in ("max_policy_lag", "prefetch_batches"):
        if getattr(config, name) == 0:
            raise invalid(name, 0, "None or an int >= 1", context=why)


def check_gradient_worker_batches(config: SchemeConfig) -> None:
    """Each gradient worker's share of an update splits evenly over its collectors."""
    per_update = config._workers_per_update()
    if config.frames_per_batch % per_update:
        raise invalid(
            "frames_per_batch", config.frames_per_batch,
            "a multiple of num_grad_workers (each worker's share of an update)",
            context=f"num_grad_workers={config.num_grad_workers} and synchronous gradients",
        )  # fmt: skip
    if config.frames_per_gradient() % config.num_collectors:
        raise invalid(
            "frames_per_batch", config.frames_per_batch,
            f"a multiple of {config.num_collectors * per_update} (each gradient's "
            f"{config.frames_per_gradient()} frames split evenly over the collectors)",
            context=f"num_collectors={config.num_collectors} per gradient worker",
        )  # fmt: skip


def check_learner_group(config: SchemeConfig) -> None:
    """Learner groups train the driver's batches (gradient workers are their own learners)."""
    if config.num_learners and config.num_grad_workers:
        why = f"num_learners={config.num_learners} (a learner group trains the driver's batches)"
        raise invalid("num_grad_workers", config.num_grad_workers, "0", context=why)
