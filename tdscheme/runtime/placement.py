"""Placement checks: actors Ray cannot place are an error at construction, never a silent hang.

Ray queues an actor whose resource request no node can satisfy and waits
forever (only its autoscaler logs a line). Before a pool waits on new actors it
calls :func:`check_fits`: the requests of every new actor, added up, are compared
with the cluster's total resources (``ray.cluster_resources()``), and each single
request with the largest node. An impossible request raises a
:class:`PlacementError` naming the argument, the request and what the cluster has.
A feasible request that stays pending (other actors hold the resources) is caught
by :func:`wait_started` after ``actor_start_timeout_s``.

Autoscaling clusters: the check sees only the nodes the cluster has now. An
autoscaler adds nodes for pending requests, but tdscheme cannot see how many it
may add, so by default a request beyond today's cluster is reported as
impossible; ``RayCollector(placement="wait")`` skips the check and lets the
workers wait ``actor_start_timeout_s`` to be placed (or ask the autoscaler for the
nodes first, ``ray.autoscaler.sdk.request_resources``).

Example:
    >>> total = {"CPU": 2.0, "memory": 8e9}
    >>> shortfall([{"num_cpus": 1}] * 4, total, nodes=[total])
    'CPU: 4 asked in all, the cluster has 2'
    >>> shortfall([{"num_cpus": 1}] * 2, total, nodes=[total]) is None
    True
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import ray

from tdscheme.errors import PlacementError

__all__ = ["check_fits", "cluster_cpus", "requested_resources", "shortfall", "wait_started"]

logger = logging.getLogger(__name__)

#: Ray option -> the resource name Ray reports in ``cluster_resources()``.
_OPTION_RESOURCES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def requested_resources(options: Mapping[str, Any]) -> Counter:
    """The resources one actor holds while it lives, as Ray names them.

    An actor without ``num_cpus`` holds no CPU once placed (Ray's rule), so it
    asks for none here.

    Example:
        >>> dict(requested_resources({"num_cpus": 1, "num_gpus": 0.2, "resources": {"TPU": 1}}))
        {'CPU': 1, 'GPU': 0.2, 'TPU': 1}
    """
    asked: Counter = Counter()
    for option, name in _OPTION_RESOURCES.items():
        value = options.get(option)
        if value:
            asked[name] += value
    for name, value in (options.get("resources") or {}).items():
        if value:
            asked[name] += value
    return asked


def shortfall(
    requests: Sequence[Mapping[str, Any]],
    total: Mapping[str, float],
    *,
    nodes: Sequence[Mapping[str, float]],
) -> str | None:
    """Why ``requests`` (Ray actor options) cannot all be placed; ``None`` when they can.

    Args:
        requests: the options of every new actor.
        total: the cluster's resources (``ray.cluster_resources()``).
        nodes: each alive node's resources (one actor must fit on one node).
    """
    summed: Counter = Counter()
    for options in requests:
        asked = requested_resources(options)
        summed.update(asked)
        for name, value in asked.items():
            biggest = max((node.get(name, 0.0) for node in nodes), default=0.0)
            if value > biggest + 1e-9:
                return f"{name}: {_fmt(value)} asked by one actor, the largest node has {_fmt(biggest)}"
    for name, value in summed.items():
        have = total.get(name, 0.0)
        if value > have + 1e-9:
            return f"{name}: {_fmt(value)} asked in all, the cluster has {_fmt(have)}"
    return None


def cluster_cpus() -> float:
    """The CPUs of the cluster this process is connected to (Ray's ``cluster_resources()``)."""
    return float(ray.cluster_resources().get("CPU", 0.0))


def check_fits(requests: Sequence[Mapping[str, Any]], *, what: str, argument: str) -> None:
    """Raises :class:`PlacementError` when Ray could never place ``requests`` together.

    Args:
        requests: the Ray options of every new actor.
        what: the actors, as the message names them (``"4 collector workers"``).
        argument: the argument(s) that set the requests, as the user wrote them.

    Raises:
        PlacementError: naming ``argument``, the requests and the cluster's resources.
    """
    if not requests:
        return
    total = ray.cluster_resources()
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    why = shortfall(requests, total, nodes=nodes)
    if why is None:
        return
    distinct = sorted({repr(dict(options)) for options in requests})
    raise PlacementError(
        f"Ray cannot place {what}: each asks {' or '.join(distinct)} ({argument}); {why}. "
        f"Cluster resources: {_summary(total)}. Use fewer workers or a smaller share per "
        f"worker, e.g. {{'num_cpus': 0.5}} (an autoscaling cluster that will add the "
        f"nodes: placement='wait')"
    )


def wait_started(
    pings: Sequence[Any],
    *,
    timeout_s: float,
    what: str,
    argument: str,
    ids: Sequence[int] | None = None,
) -> None:
    """Waits until every actor answers its ping (is placed and built), for ``timeout_s`` at most.

    An actor whose constructor failed or that died answers with an error, which is
    left for the caller to report with its traceback (it holds the same futures);
    only silence (the actor still pending) is this function's business.

    Args:
        pings: one future of a cheap call per actor, in the actors' order.
        timeout_s: ``actor_start_timeout_s``.
        what: how the message names the actors (``"collector worker"``).
        argument: the argument that set their resources, for the message.
        ids: the actors' worker ids, for the message (default: their index in ``pings``).

    Raises:
        PlacementError: some actors did not start within ``timeout_s``, naming
            them (by ``ids``), their resources and what the cluster has free.
    """
    index = dict(zip(pings, range(len(pings)) if ids is None else ids, strict=True))
    deadline = time.monotonic() + timeout_s
    pending = list(pings)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(left, 1.0))
    if not pending:
        return
    silent = sorted(index[ref] for ref in pending)
    raise PlacementError(
        f"{what}s {silent} did not start within actor_start_timeout_s={timeout_s:g} s: "
        f"Ray has not placed them (their resources: {argument}) or their constructor is "
        f"still running. Free resources: {_summary(ray.available_resources())}; cluster "
        f"resources: {_summary(ray.cluster_resources())}"
    )


def gang(options: Mapping[str, Any], count: int, *, timeout_s: float, what: str, argument: str):
    """Reserves ``count`` bundles of ``options``' resources at once (a Ray placement group).

    All or nothing: the actors scheduled into the bundles start together or not at all
    (a learner group cannot train with some of its ranks). The caller removes the group
    (``ray.util.remove_placement_group``) after its actors.

    Args:
        options: the Ray options of one actor (its resources make one bundle).
        count: bundles, one per actor.
        timeout_s: how long Ray may take to reserve them (``actor_start_timeout_s``).
        what: how the message names the actors (``"learner rank"``).
        argument: the argument(s) that set their resources, for the message.

    Returns:
        The ready placement group; actor ``i`` goes into bundle ``i`` (:func:`in_bundle`).

    Raises:
        PlacementError: the bundles were not reserved within ``timeout_s``, naming the
            request and what the cluster has free.
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = dict(requested_resources(options)) or {"CPU": 0.001}  # a bundle cannot be empty
    group = placement_group([dict(bundle) for _ in range(count)], strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise PlacementError(
            f"{count} {what}s of {_summary(bundle)} each ({argument}) could not be placed "
            f"together within actor_start_timeout_s={timeout_s:g} s. Free resources: "
            f"{_summary(ray.available_resources())}; cluster resources: "
            f"{_summary(ray.cluster_resources())}"
        )
    return group


def in_bundle(options: Mapping[str, Any], group: Any, index: int) -> dict[str, Any]:
    """``options`` with the actor scheduled into bundle ``index`` of placement group ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
    return {**options, "scheduling_strategy": strategy}


def _summary(resources: Mapping[str, float]) -> str:
    shown = {
        k: _fmt(v)
        for k, v in sorted(resources.items())
        if not k.startswith("node:") and k not in ("object_store_memory",)
    }
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "none"


def _fmt(value: float) -> str:
    if value >= 2**20:
        return f"{value / 2**30:.1f} GiB"
    return f"{value:g}"
