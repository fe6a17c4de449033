"""The worker's half of torchrl's surface: the calls torchrl makes on a RayCollector's worker actors.

torchrl's own code calls these on the actors behind ``collector.workers``, by torchrl's
names, and each is forwarded to the worker's torchrl collector:

* ``cascade_execute`` and ``get_distant_attr``: torchrl RayCollector's remote calls
  (the driver's half, over every worker and bounded, is
  :mod:`~tdscheme.collectors.torchrl_compat.remote_calls`);
* ``register_scheme_receiver``, ``_weight_sync_signature``, ``_connect_weights_scheme``
  and ``_receive_weights_scheme``: what torchrl's Ray learner calls on each weight
  receiver (the driver's half is :mod:`~tdscheme.collectors.torchrl_compat.learner_sync`).
  They run in the actor's default concurrency group, after the batch being collected,
  so a batch never mixes two versions; the learner's ``model_version`` becomes the
  worker's policy version, stamped on every frame it collects next.

:class:`CollectorWorker` is the actor class a :class:`~tdscheme.RayCollector` starts:
:class:`~tdscheme.collectors.worker.actor.BaseCollectorWorker` with these calls, so the
worker's own room knows nothing of torchrl's surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tdscheme.collectors.worker.actor import BaseCollectorWorker

__all__ = ["CollectorWorker", "TorchrlWorkerCalls"]


class TorchrlWorkerCalls:
    """torchrl's calls on a worker actor, forwarded to its torchrl collector (see the module).

    The host class has ``_collector`` (the torchrl collector) and
    ``_set_running_version(version)``.
    """

    _collector: Any

    if TYPE_CHECKING:  # the host's (a stub here would shadow it in the MRO)

        def _set_running_version(self, policy_version: int | None) -> None: ...

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


class CollectorWorker(TorchrlWorkerCalls, BaseCollectorWorker):
    """The collector actor: a :class:`~tdscheme.collectors.worker.actor.BaseCollectorWorker`
    that also answers torchrl's calls (``tdscheme.collectors.CollectorWorker``).

    Example:
        >>> from functools import partial
        >>> from tdscheme.collectors.settings.specs import WorkerSpec
        >>> from tdscheme.envs import make_env
        >>> worker = CollectorWorker(0, WorkerSpec(partial(make_env, "CartPole-v1"),
        ...                                        frames_per_batch=8))
        >>> worker.get_distant_attr("frames_per_batch")
        8
        >>> worker.shutdown()
    """
