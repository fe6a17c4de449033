"""CollectorParts: what the objects a RayCollector is composed of share, built once.

A :class:`~tdscheme.collectors.RayCollector` is a thin surface over composed
objects (the flow, the weight pusher, the remote calls, the state, the stats
report); each gets this one small record instead of reaching into the collector.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tdscheme.collectors.config import RayCollectorConfig
    from tdscheme.collectors.driver.pool import WorkerPool
    from tdscheme.collectors.driver.stats import CollectorStats
    from tdscheme.transport import TensorDictCodec

__all__ = ["CollectorParts", "documented_by"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class CollectorParts:
    """A collector's settings, workers, counters and codec, and its "is it open" check.

    Attributes:
        config: the collector's settings.
        pool: its worker actors.
        stats: its frame ledger, counters and timers.
        codec: encodes weights and decodes batches.
        check_open: raises ``RuntimeError`` once the collector is shut down.
    """

    config: RayCollectorConfig
    pool: WorkerPool
    stats: CollectorStats
    codec: TensorDictCodec
    check_open: Callable[[], None]

    @property
    def num_workers(self) -> int:
        """The number of workers (grows with ``add_collectors``)."""
        return len(self.pool)


def documented_by(source: Callable[..., Any]) -> Callable[[F], F]:
    """Gives a one-line delegator the docstring of the method it calls.

    Example:
        >>> def push(weights):
        ...     "Pushes weights."
        >>> @documented_by(push)
        ... def update_policy_weights_(weights):
        ...     return push(weights)
        >>> update_policy_weights_.__doc__
        'Pushes weights.'
    """

    def document(delegator: F) -> F:
        delegator.__doc__ = source.__doc__
        return delegator

    return document
