"""Weights published by torchrl's Ray learner straight to the workers (``learner_backend="ray"``).

torchrl 0.14's trainers can run their optimization on a gang of Ray learner actors
(``learner_backend="ray"``, ``_RayTrainerExecution``). The learner then sends the policy
weights itself, over a torch.distributed group that it shares with the weight receivers,
instead of the driver pushing them. It asks the collector for that topology through
``collector._learner_weight_sync(new_generation=...)``, which returns a torchrl
``RayWeightSyncScheme`` initialized on the sender side and registered on every receiver.

Two halves live here, both wrapping torchrl's own scheme (nothing of its transport is
rewritten):

* :class:`LearnerWeightSync`, composed into :class:`~tdscheme.collectors.RayCollector`: builds
  the scheme with the worker actors (or, with a Ray ``InferenceServer`` as the policy, the
  server's actor) as its receivers, as torchrl's RayCollector does. From then on the
  learner owns the weights: driver pushes (``update_policy_weights_`` and the automatic
  ones) raise or stop.
* :class:`~tdscheme.collectors.torchrl_compat.worker_calls.TorchrlWorkerCalls`, on each
  worker actor: the calls torchrl's learner makes on each receiver, forwarded to the
  worker's torchrl collector; the learner's ``model_version`` becomes the worker's
  policy version, stamped on every frame it collects next.

A RayCollector holds a plain :class:`~tdscheme.collectors.driver.weights.WeightPusher`;
it wraps it in :class:`LearnerWeightSync` only when torchrl's surface is used: a
``weight_sync_schemes`` argument or a policy service at construction, or torchrl's
learner asking for the scheme (``collector._learner_weight_sync()``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import ray
from tensordict import TensorDictBase
from torch import nn

from tdscheme.collectors.driver.stats import CollectorParts
from tdscheme.collectors.driver.weight_schema import check_finite
from tdscheme.collectors.driver.weights import POLICY_MODEL_ID, WeightPusher, weights_from
from tdscheme.collectors.settings.torchrl_args import is_policy_service
from tdscheme.rollout.torchrl_names import ray_weight_scheme_class

__all__ = ["LearnerWeightSync"]

logger = logging.getLogger(__name__)


class LearnerWeightSync:
    """The weight path of a RayCollector, with torchrl's learner publication and policy services.

    Wraps the driver's :class:`~tdscheme.collectors.driver.weights.WeightPusher`: a push
    goes to the workers through it, unless a torchrl learner owns the weights (then it
    raises) or the policy is a Ray ``InferenceServer`` (then the server is updated);
    automatic pushes stop in both cases.

    Args:
        pusher: the driver's weight pusher.
        parts: the collector's shared parts.
    """

    def __init__(self, pusher: WeightPusher, parts: CollectorParts) -> None:
        self.pusher = pusher
        self.parts = parts
        #: The scheme handed to the learner (``None`` until it asks for one).
        self._learner_scheme: Any = None

    @property
    def learner_publishes_weights(self) -> bool:
        """Whether a torchrl learner publishes the policy weights (driver pushes are off)."""
        return self._learner_scheme is not None

    def scheme(self, *, new_generation: bool = False) -> Any:
        """The policy receiver topology for torchrl's Ray learner (torchrl's private hook).

        torchrl's ``_RayTrainerExecution`` calls it when its learner gang starts
        (``new_generation=True`` when it restarts): the returned
        ``RayWeightSyncScheme`` is initialized on the sender side with the receivers
        as its targets and registered on each of them; the learner connects it and
        sends the weights, with its model version, on its first publication.

        Receivers: the worker actors, in worker order; with a Ray ``InferenceServer``
        as the policy, the server's actor only (the workers call the server). A
        ``weight_sync_schemes={"policy": RayWeightSyncScheme(...)}`` given at
        construction is copied, uninitialized, so its options (e.g. the backend) hold.

        A worker restarted after this runs the initial weights, stamped with version
        0, and is not in the learner's group: the learner's next publication fails
        until it starts a new generation.

        Args:
            new_generation: build a new scheme even if one was handed out.

        Returns:
            The sender-side scheme for the learner.

        Raises:
            RuntimeError: the driver already pushed weights (one owner of the weights),
                or the collector is shut down.
            ValueError: ``max_policy_lag`` is set: it is measured against driver
                pushes, which stop here.
        """
        if not new_generation and self._learner_scheme is not None:
            return self._learner_scheme
        config, pool, stats = self.parts.config, self.parts.pool, self.parts.stats
        self.parts.check_open()
        if self._learner_scheme is None and stats.weight_pushes:
            raise RuntimeError(
                "Weight synchronization was already initialized on the controller: this "
                f"collector pushed weights {stats.weight_pushes} time(s) with "
                "update_policy_weights_; a torchrl learner can publish the weights only to "
                "a collector that never pushed any"
            )
        if config.max_policy_lag is not None:
            raise ValueError(
                f"max_policy_lag={config.max_policy_lag} is invalid with a torchrl "
                f"learner publishing the weights; accepted: None (the lag bound is measured "
                f"against the driver's pushes, and the learner's publications bypass the "
                f"driver)"
            )
        service = config.policy if is_policy_service(config.policy) else None
        scheme = self._uninitialized_scheme()
        targets = [service._actor] if service is not None else pool.actors()
        scheme.init_on_sender(
            model_id=POLICY_MODEL_ID, remote_collectors=targets, num_workers=len(targets)
        )
        scheme._manage_receiver_connect = True  # the learner's connect() connects receivers
        schemes = {POLICY_MODEL_ID: scheme}  # registered unsynchronized: the learner connects
        if service is None:
            pool.call_all(
                "register_scheme_receiver", [(schemes, False)] * len(pool),
                timeout_s=config.batch_timeout_s,
            )  # fmt: skip
        else:
            calls = [
                t.register_scheme_receiver.remote(schemes, synchronize_weights=False)
                for t in targets
            ]
            ray.get(calls, timeout=config.batch_timeout_s)
        if self._learner_scheme is not None and self._learner_scheme is not scheme:
            logger.info("learner weight sync: new generation, %d receiver(s)", len(targets))
        self._learner_scheme = scheme
        return scheme

    def _uninitialized_scheme(self) -> Any:
        configured = (self.parts.config.weight_sync_schemes or {}).get(POLICY_MODEL_ID)
        if configured is not None:
            return configured._copy_uninitialized()
        return ray_weight_scheme_class()()

    def push(
        self,
        policy_or_weights: TensorDictBase | nn.Module | Mapping | None = None,
        **kwargs: Any,
    ) -> None:
        """Pushes weights, unless a learner owns them; to a policy service, updates it.

        See :meth:`~tdscheme.collectors.driver.weights.WeightPusher.push`.
        With a Ray ``InferenceServer`` as the policy, the weights go to the server
        (``update_model_weights``), as torchrl's RayCollector does.

        Raises:
            RuntimeError: a torchrl learner publishes the weights of this collector.
            ValueError: a policy service and no weights given.
        """
        if self.learner_publishes_weights:
            raise RuntimeError(
                "Policy weights are published by the learner backend for this collector "
                "(learner_backend='ray'); update_policy_weights_ would overwrite them"
            )
        if is_policy_service(self.parts.config.policy):
            self._update_service(policy_or_weights, **kwargs)
            return
        self.pusher.push(policy_or_weights, **kwargs)

    def _update_service(self, policy_or_weights: Any, **kwargs: Any) -> None:
        self.parts.check_open()
        given = [policy_or_weights, kwargs.pop("weights", None), kwargs.pop("policy", None)]
        given = [x for x in given if x is not None]
        kwargs.pop("worker_ids", None)  # the one server serves every worker
        if kwargs:
            raise TypeError(f"update_policy_weights_ got unsupported arguments {sorted(kwargs)}")
        if len(given) != 1:
            raise ValueError(
                "update_policy_weights_ with an inference service as the policy needs exactly "
                f"one of policy_or_weights, weights and policy; got {len(given)}"
            )
        weights = weights_from(given[0])
        if isinstance(weights, TensorDictBase):
            check_finite(weights)  # NaN weights never reach the server (nothing is sent)
        self.parts.config.policy.update_model_weights(weights)
        self.parts.stats.weight_pushes += 1

    def auto_push(self, worker_ids: list[int]) -> None:
        """The pusher's automatic pushes, unless a learner (or a service's owner) sends weights."""
        if self.learner_publishes_weights or is_policy_service(self.parts.config.policy):
            return
        self.pusher.auto_push(worker_ids)
