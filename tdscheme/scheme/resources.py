"""A run's CPUs added up before any actor starts: shared to fit where the user chose none, else refused.

Each pool checks its own actors against the cluster (:func:`~tdscheme.runtime.placement.check_fits`),
but two pools that each fit can still not fit together: two learner ranks holding both
CPUs of a 2-core machine leave the collectors waiting for a CPU that never frees. Here
the Scheme adds up what all its actors ask for (collectors or gradient workers, and
learner ranks) against the CPUs of the Ray it runs on:

- it fits: nothing changes;
- it does not, and the user set none of the resources of the parts in play: each actor
  gets an equal share of the CPUs (fractional ``num_cpus``), said in one warning;
- it does not, and the user chose some: :class:`~tdscheme.errors.PlacementError` with the
  arithmetic and settings that would fit, at once (not a start timeout minutes later).

``placement="wait"`` skips this (the cluster may grow on purpose), as it skips the pools' checks.

Example:
    >>> config = SchemeConfig(num_collectors=2, num_learners=2)
    >>> shared = fit_cpus(config, cluster_cpus=2.0)
    >>> shared.collector_resources, shared.learner_resources
    ({'num_cpus': 0.5}, {'num_cpus': 0.5})
    >>> fit_cpus(SchemeConfig(num_collectors=2), cluster_cpus=2.0).collector_resources is None
    True
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from tdscheme.errors import PlacementError
from tdscheme.scheme.config import SchemeConfig

__all__ = ["cpu_asks", "fit_cpus"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CpuAsk:
    """One kind of actor: how many, the CPUs each asks for, and the setting that decides it."""

    role: str
    count: int
    cpus: float
    setting: str
    given: bool


def _cpus(options: Mapping[str, Any] | None) -> float:
    return 1.0 if options is None else float(options.get("num_cpus", 1))


def cpu_asks(config: SchemeConfig) -> list[CpuAsk]:
    """What each kind of actor of ``config``'s run asks for (a Ray-held buffer takes no CPU).

    Example:
        >>> [(a.role, a.count, a.cpus) for a in cpu_asks(SchemeConfig(num_learners=2))]
        [('collectors', 2, 1.0), ('learner ranks', 2, 1.0)]
    """
    asks = []
    if config.num_grad_workers:
        asks.append(CpuAsk(
            "gradient workers", config.num_grad_workers, _cpus(config.grad_worker_resources),
            "grad_worker_resources", config.grad_worker_resources is not None,
        ))  # fmt: skip
    else:
        per = config.collector_resources
        if isinstance(per, (list, tuple)):  # one entry per collector: their mean, as given
            cpus = sum(_cpus(entry) for entry in per) / max(1, len(per))
        else:
            cpus = _cpus(per)
        asks.append(CpuAsk(
            "collectors", config.num_collectors, cpus, "collector_resources", per is not None
        ))  # fmt: skip
    if config.num_learners:
        asks.append(CpuAsk(
            "learner ranks", config.num_learners, _cpus(config.learner_resources),
            "learner_resources", config.learner_resources is not None,
        ))  # fmt: skip
    return asks


def fit_cpus(config: SchemeConfig, *, cluster_cpus: float) -> SchemeConfig:
    """``config`` as it fits ``cluster_cpus``: unchanged, or with the CPUs shared.

    Raises:
        PlacementError: the user's own resources ask for more CPUs than the cluster has.
    """
    asks = cpu_asks(config)
    total = sum(a.count * a.cpus for a in asks)
    if config.placement == "wait" or total <= cluster_cpus + 1e-9:
        return config
    actors = sum(a.count for a in asks)
    share = math.floor(cluster_cpus / actors * 100) / 100
    arithmetic = " + ".join(f"{a.count} {a.role} x {a.cpus:g}" for a in asks)
    if any(a.given for a in asks) or share <= 0:
        fits = " ".join(
            f"--{a.setting.replace('_', '-')} '{json.dumps({'num_cpus': share})}'" for a in asks
        )
        raise PlacementError(
            f"{arithmetic} = {total:g} CPUs asked, the cluster has {cluster_cpus:g}; "
            + (f"these settings fit: {fits}" if share > 0 else "use fewer actors")
            + " (or placement='wait' for a cluster that grows)"
        )
    logger.warning(
        "%s = %g CPUs asked, this Ray has %g: each takes %g CPU (set %s to choose)",
        arithmetic, total, cluster_cpus, share, " / ".join(a.setting for a in asks),
    )  # fmt: skip
    return dataclasses.replace(config, **{a.setting: {"num_cpus": share} for a in asks})
