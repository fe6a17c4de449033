"""What a weight push must look like: the policy's keys, shapes and dtypes, finite values.

A RayCollector checks each push on the driver, before anything is sent, so that a
wrong push fails at once and names its keys, instead of failing later inside a
worker (a wrong shape), being applied in part (missing keys) or reaching every
worker (NaN/inf weights).

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> schema = WeightSchema.of(TensorDict(weight=torch.zeros(1, 3), bias=torch.zeros(1)))
    >>> schema.check(TensorDict(weight=torch.zeros(1, 3), bias=torch.zeros(1)), source="the policy")
    >>> schema.check(TensorDict(weight=torch.zeros(2, 3)), source="the policy")
    Traceback (most recent call last):
    ...
    ValueError: policy_or_weights is invalid with missing keys ['bias']; 'weight' shape (2, 3) (expected (1, 3)); accepted: weights with the keys, shapes and dtypes of the policy (bias: (1,) float32, weight: (1, 3) float32)
    >>> check_finite(TensorDict(weight=torch.tensor([1.0, float("nan")])))
    Traceback (most recent call last):
    ...
    ValueError: policy_or_weights has non-finite (NaN or inf) values in ['weight']; accepted: finite weights (nothing was pushed)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase

from tdscheme.finite import nonfinite_entries

__all__ = ["WeightSchema", "check_finite"]

ARGUMENT = "policy_or_weights"


def _leaves(weights: TensorDictBase) -> dict[str, torch.Tensor]:
    """The tensors of ``weights`` by flat ``"a.b"`` key (no copies)."""
    leaves = {}
    for key, value in weights.items(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor):
            leaves[key if isinstance(key, str) else ".".join(key)] = value
    return leaves


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(shape: tuple[int, ...], dtype: torch.dtype) -> str:
    return f"{shape} {_dtype(dtype)}"


@dataclass(frozen=True)
class WeightSchema:
    """The key, shape and dtype of each tensor a worker's policy loads."""

    entries: dict[str, tuple[tuple[int, ...], torch.dtype]]

    @classmethod
    def of(cls, weights: TensorDictBase) -> WeightSchema:
        """The schema of ``weights`` (reads metadata only)."""
        return cls({k: (tuple(v.shape), v.dtype) for k, v in _leaves(weights).items()})

    def check(self, weights: TensorDictBase, *, source: str) -> None:
        """Raises unless ``weights`` has exactly these keys, shapes and dtypes.

        Args:
            weights: the weights to push.
            source: where the schema comes from, for the message (e.g. ``"the policy"``).

        Raises:
            ValueError: naming the missing and unexpected keys, and each key whose
                shape or dtype differs (expected and given).
        """
        given = _leaves(weights)
        problems = []
        missing = sorted(self.entries.keys() - given.keys())
        unexpected = sorted(given.keys() - self.entries.keys())
        if missing:
            problems.append(f"missing keys {missing}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        for key in sorted(self.entries.keys() & given.keys()):
            shape, dtype = self.entries[key]
            value = given[key]
            if tuple(value.shape) != shape:
                problems.append(f"{key!r} shape {tuple(value.shape)} (expected {shape})")
            if value.dtype != dtype:
                problems.append(f"{key!r} dtype {_dtype(value.dtype)} (expected {_dtype(dtype)})")
        if problems:
            expected = ", ".join(f"{k}: {_describe(*v)}" for k, v in sorted(self.entries.items()))
            raise ValueError(
                f"{ARGUMENT} is invalid with {'; '.join(problems)}; accepted: weights with "
                f"the keys, shapes and dtypes of {source} ({expected})"
            )


def check_finite(weights: TensorDictBase) -> None:
    """Raises if a floating tensor of ``weights`` holds NaN or inf (one device sync).

    Raises:
        ValueError: naming the keys with non-finite values.
    """
    bad = nonfinite_entries(_leaves(weights).items())
    if bad:
        raise ValueError(
            f"{ARGUMENT} has non-finite (NaN or inf) values in {bad}; accepted: finite weights "
            f"(nothing was pushed)"
        )
