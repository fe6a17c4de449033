"""torchrl's weight-receiver calls on a collector worker (its Ray learner publishes weights).

The driver's half (the scheme handed to torchrl's learner) is
:mod:`tdscheme.collectors.torchrl_compat.learner_sync`; this half runs in the worker
actor and forwards each call to the worker's torchrl collector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SchemeReceiverMixin"]


class SchemeReceiverMixin:
    """torchrl's weight-receiver calls on a worker actor, forwarded to its torchrl collector.

    The host class (:class:`~tdscheme.collectors.CollectorWorker`) has ``_collector``
    (the torchrl collector) and :meth:`_set_running_version`. The names are
    torchrl's: its learner calls them on each receiver actor.
    """

    _collector: Any

    def _set_running_version(self, policy_version: int | None) -> None:
        raise NotImplementedError

    def register_scheme_receiver(
        self, weight_recv_schemes: Mapping[str, Any], synchronize_weights: bool = True
    ) -> None:
        """Registers torchrl receiver schemes on the worker's collector (torchrl's call)."""
        self._collector.register_scheme_receiver(
            dict(weight_recv_schemes), synchronize_weights=synchronize_weights
        )

    def _weight_sync_signature(self, model_id: str) -> Any:
        """The tensor schema the worker's collector expects for ``model_id`` (torchrl's call)."""
        return self._collector._weight_sync_signature(model_id)

    def _connect_weights_scheme(self, model_version: int | None = None) -> None:
        """Joins the learner's group and loads its first weights (torchrl's call)."""
        self._collector._connect_weights_scheme(model_version=model_version)
        self._set_running_version(model_version)

    def _receive_weights_scheme(self, model_version: int | None = None) -> None:
        """Loads the weights the learner sends now (torchrl's call)."""
        self._collector._receive_weights_scheme(model_version=model_version)
        self._set_running_version(model_version)
