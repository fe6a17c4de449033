"""A RayCollector's weight pushes: from any source, checked, one ``ray.put`` for every worker.

torchrl's automatic pushes (``update_after_each_batch``, ``max_weight_update_interval``)
decide *when* to push and live with torchrl's surface
(:mod:`~tdscheme.collectors.torchrl_compat.auto_push`); they push through this pusher.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdscheme.collectors.driver.stats import CollectorParts
from tdscheme.collectors.driver.weight_schema import WeightSchema, check_finite
from tdscheme.validation import invalid

__all__ = ["WeightPusher", "weights_from"]


def weights_from(source: Any) -> TensorDictBase:
    """The weights to push, as a TensorDict.

    Args:
        source: a module (its parameters and buffers), a TensorDict, or a dict of
            tensors (flat ``"a.b"`` keys are unflattened).

    Raises:
        TypeError: ``source`` is none of these.

    Example:
        >>> sorted(weights_from(nn.Linear(2, 1)).keys())
        ['bias', 'weight']
    """
    if isinstance(source, nn.Module):
        return TensorDict.from_module(source).data
    if isinstance(source, TensorDictBase):
        return source.data if hasattr(source, "data") else source
    if isinstance(source, dict):
        return TensorDict(source).unflatten_keys(".") if source else TensorDict()
    raise TypeError(
        f"policy_or_weights must be a TensorDict, a dict of tensors or an nn.Module, "
        f"got {type(source).__name__}"
    )


#: The one model a RayCollector's workers receive weights for (torchrl's ``model_id``).
POLICY_MODEL_ID = "policy"


def _check_model_ids(by_model: Mapping[Any, Any]) -> None:
    """Raises unless ``by_model`` names exactly the ``"policy"`` model.

    Example:
        >>> _check_model_ids({"policy": None})
        >>> _check_model_ids({"critic": None})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: model_id='critic' is invalid; accepted: 'policy' (...
    """
    if list(by_model) != [POLICY_MODEL_ID]:
        bad = next((k for k in by_model if k != POLICY_MODEL_ID), None)
        raise invalid(
            "model_id", bad,
            f"{POLICY_MODEL_ID!r} (the one model a RayCollector's workers receive weights "
            f"for: the policy they run; torchrl's weight_sync_schemes has only this key too)",
        )  # fmt: skip


class WeightPusher:
    """A RayCollector's weight pushes: ``update_policy_weights_`` and ``wait_for_weights``.

    Args:
        parts: the collector's shared parts (settings, workers, counters, codec).
        on_push: called with the worker ids of every push (torchrl's automatic rule
            counts batches since each worker's last push).
    """

    def __init__(
        self, parts: CollectorParts, *, on_push: Callable[[list[int]], None] | None = None
    ) -> None:
        self.parts = parts
        self.on_push = on_push
        #: With ``policy_factory`` only: the schema of the first push, which later ones match.
        self._pushed_schema: WeightSchema | None = None

    def push(
        self,
        policy_or_weights: TensorDictBase | nn.Module | dict | None = None,
        *,
        worker_ids: int | Sequence[int] | None = None,
        weights: TensorDictBase | dict | None = None,
        policy: nn.Module | None = None,
        model_id: str | None = None,
        weights_dict: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Pushes new policy weights (one ``ray.put``) and bumps ``policy_version``.

        Does not wait for the workers: each acknowledges the new version when the
        weights arrive (even while it collects a batch), and runs them and stamps
        its frames with the new version from the next batch it starts.
        :meth:`wait_for_weights` blocks until all acknowledged.

        Args:
            policy_or_weights: a TensorDict or dict of weights, or a module to take
                them from. ``None``: the ``policy`` given at construction.
            worker_ids: push to these workers only (default: all).
            weights, policy: keyword forms of ``policy_or_weights`` (torchrl's).
            model_id: the model to update (torchrl's); a RayCollector has one,
                ``"policy"`` (the default).
            weights_dict: ``{"policy": weights}``, torchrl's form for several models
                at once (a RayCollector has one).

        Checked on the driver before anything is sent: the weights must have
        the keys, shapes and dtypes of the collector's policy (with
        ``policy_factory`` only: of the first push), and finite values.

        Raises:
            ValueError: conflicting arguments, unknown worker ids, a model other
                than ``"policy"``, no weights to push, weights whose keys, shapes or
                dtypes differ from the policy's (each named), or NaN/inf weights.
        """
        if kwargs:
            raise TypeError(f"update_policy_weights_ got unsupported arguments {sorted(kwargs)}")
        given = [x for x in (policy_or_weights, weights, policy) if x is not None]
        if weights_dict is not None:
            if given or model_id is not None:
                raise ValueError(
                    "weights_dict cannot be combined with policy_or_weights, weights, policy "
                    "or model_id (torchrl's rule)"
                )
            _check_model_ids(weights_dict)
            given = [weights_dict[POLICY_MODEL_ID]]
        if model_id is not None:
            _check_model_ids({model_id: None})
        if len(given) > 1:
            raise ValueError("pass only one of policy_or_weights, weights and policy")
        parts = self.parts
        parts.check_open()
        ids = self._worker_ids(worker_ids)
        start = time.perf_counter()
        weights = self._weights_from(given[0] if given else None)
        self._check_weights(weights)
        payload = parts.codec.encode(weights)
        parts.pool.push_weights(payload, parts.pool.version + 1, ids)
        if self.on_push is not None:
            self.on_push(ids)
        parts.stats.weight_pushes += 1
        parts.stats.weight_push_s += time.perf_counter() - start

    def wait(self, timeout_s: float = 60.0) -> list[int]:
        """Blocks until every worker acknowledged its latest push.

        Returns:
            The policy version each worker runs.

        Raises:
            TimeoutError: not all acknowledged within ``timeout_s``.
        """
        self.parts.check_open()
        return self.parts.pool.wait_for_weights(timeout_s)

    def auto_push(self, worker_ids: list[int]) -> None:
        """An automatic push (torchrl's rule found ``worker_ids`` due): the policy's weights."""
        self.push(worker_ids=worker_ids)

    def _worker_ids(self, worker_ids: int | Sequence[int] | None) -> list[int]:
        num_workers = self.parts.num_workers
        if worker_ids is None:
            return list(range(num_workers))
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < num_workers]
        if bad:
            raise ValueError(
                f"worker_ids={worker_ids!r} has unknown ids {bad}; accepted: 0..{num_workers - 1}"
            )
        return ids

    def _check_weights(self, weights: TensorDictBase) -> None:
        """Raises unless ``weights`` match the reference schema and are finite.

        The reference: the collector's policy module, else the first non-empty push
        (remembered); none yet: only finiteness is checked. Empty weights are
        pushed as before (a worker ignores them).
        """
        if weights.is_empty():
            return
        policy = self.parts.config.policy_module()
        if policy is not None:
            WeightSchema.of(weights_from(policy)).check(weights, source="the collector's policy")
        elif self._pushed_schema is not None:
            self._pushed_schema.check(weights, source="the first push (policy_factory)")
        check_finite(weights)
        if policy is None and self._pushed_schema is None:
            self._pushed_schema = WeightSchema.of(weights)

    def _weights_from(self, source: Any) -> TensorDictBase:
        if source is None:
            source = self.parts.config.policy_module()
            if source is None:
                raise ValueError(
                    "update_policy_weights_() has no weights to push: this collector was built "
                    "without an nn.Module policy; pass weights or a module"
                )
        return weights_from(source)
