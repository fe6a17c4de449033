"""torchrl RayCollector's remote calls on a collector worker, forwarded to its torchrl collector.

The driver's half (``map_fn``, ``get_distant_attr`` over every worker, bounded) is
:mod:`tdscheme.collectors.torchrl_compat.remote_calls`; this half runs in the worker
actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RemoteCallsMixin"]


class RemoteCallsMixin:
    """``cascade_execute`` and ``get_distant_attr`` on a worker actor (torchrl's names).

    The host class (:class:`~tdscheme.collectors.CollectorWorker`) has ``_collector``
    (the torchrl collector).
    """

    _collector: Any

    def cascade_execute(
        self, attr_path: str, args: tuple = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        """Calls the wrapped collector's ``cascade_execute(attr_path, *args, **kwargs)``.

        torchrl's: ``attr_path`` names a method (or attribute) of the collector,
        e.g. ``"env.reset"`` or ``"policy.forward"``; an attribute is returned as it is.
        """
        return self._collector.cascade_execute(attr_path, *args, **dict(kwargs or {}))

    def get_distant_attr(self, attr: str) -> Any:
        """The wrapped collector's attribute at ``attr`` (a torchrl path, e.g. ``"env.batch_size"``)."""
        return self._collector.get_distant_attr(attr)
