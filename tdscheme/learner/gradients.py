"""Gradients as TensorDicts: read them off parameters, write them back, average them.

A gradient TensorDict is keyed like ``TensorDict.from_module(loss_module)``: a
parameter named ``"critic_network_params.module.0.weight"`` by ``named_parameters()``
lives at ``("critic_network_params", "module", "0", "weight")``. It holds plain,
detached tensors, so it pickles and crosses processes like any TensorDict.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 1)
    >>> params = dict(layer.named_parameters())
    >>> layer(torch.ones(1, 2)).sum().backward()
    >>> grads = gradients_from_parameters(params)
    >>> sorted(grads.keys())
    ['bias', 'weight']
    >>> average_gradients([grads, grads * 3], weights=[1.0, 1.0])["bias"].tolist()
    [2.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

__all__ = ["assign_gradients_", "average_gradients", "gradients_from_parameters", "parameter_key"]


def parameter_key(name: str) -> tuple[str, ...]:
    """Turns a ``named_parameters()`` name into the nested key used in gradient TensorDicts.

    Args:
        name: a dotted parameter name such as ``"module.0.weight"``.

    Returns:
        The nested key, e.g. ``("module", "0", "weight")``.

    Example:
        >>> parameter_key("actor_network_params.module.0.bias")
        ('actor_network_params', 'module', '0', 'bias')
    """
    return tuple(name.split("."))


def gradients_from_parameters(
    params: Mapping[str, nn.Parameter], *, device: str | torch.device = "cpu"
) -> TensorDict:
    """Copies the ``.grad`` of each parameter into a new, detached TensorDict.

    Args:
        params: parameters by their ``named_parameters()`` name.
        device: where the copies go (CPU by default, ready to send to another process).

    Returns:
        A TensorDict with one entry per parameter (see :func:`parameter_key`); a
        parameter whose ``.grad`` is ``None`` gets zeros of its shape and dtype.

    Example:
        >>> layer = torch.nn.Linear(2, 1)
        >>> gradients_from_parameters(dict(layer.named_parameters()))["weight"].tolist()
        [[0.0, 0.0]]
    """
    grads = {}
    for name, param in params.items():
        if param.grad is None:
            grad = torch.zeros(param.shape, dtype=param.dtype, device=device)
        else:
            grad = param.grad.detach().to(device=device, copy=True)
        grads[parameter_key(name)] = grad
    return TensorDict(grads, batch_size=[])


def assign_gradients_(params: Mapping[str, nn.Parameter], grads: TensorDictBase) -> None:
    """Sets each parameter's ``.grad`` to a copy of its entry in ``grads``.

    The copies are on the parameter's device and dtype, so clipping or an
    optimizer step never writes into ``grads``.

    Args:
        params: parameters by their ``named_parameters()`` name.
        grads: a gradient TensorDict with exactly one entry per parameter.

    Raises:
        TypeError: ``grads`` is not a TensorDict.
        ValueError: ``grads`` misses a parameter, has entries for unknown
            parameters, or an entry's shape differs from its parameter's.

    Example:
        >>> layer = torch.nn.Linear(2, 1)
        >>> params = dict(layer.named_parameters())
        >>> assign_gradients_(params, TensorDict(bias=torch.ones(1), weight=torch.ones(1, 2)))
        >>> layer.bias.grad.tolist()
        [1.0]
    """
    if not isinstance(grads, TensorDictBase):
        raise TypeError(f"grads must be a TensorDict, got {type(grads).__name__}")
    expected = {parameter_key(name) for name in params}
    given = {_as_tuple(key) for key in grads.keys(include_nested=True, leaves_only=True)}
    if given != expected:
        raise ValueError(
            f"grads must have one entry per trainable parameter; "
            f"missing {sorted(expected - given)}, unexpected {sorted(given - expected)}"
        )
    for name, param in params.items():
        grad = grads.get(parameter_key(name))
        if grad.shape != param.shape:
            raise ValueError(
                f"grads[{parameter_key(name)}] has shape {tuple(grad.shape)}, "
                f"the parameter has shape {tuple(param.shape)}"
            )
        param.grad = grad.detach().to(device=param.device, dtype=param.dtype, copy=True)


def average_gradients(
    grads: Sequence[TensorDictBase], weights: Sequence[float] | None = None
) -> TensorDict:
    """Weighted average of gradient TensorDicts, e.g. weighted by each one's frame count.

    For a loss that is a mean over frames, averaging the gradients of several
    batches weighted by their frame counts gives the gradient of the loss over
    all of them together.

    Args:
        grads: gradient TensorDicts with the same keys and shapes.
        weights: one non-negative weight per gradient (``None``: equal weights);
            they need not sum to 1.

    Returns:
        ``sum(w_i * g_i) / sum(w_i)``, a new TensorDict.

    Raises:
        ValueError: ``grads`` is empty, ``weights`` has another length, a weight is
            negative or not finite, all weights are 0, or the keys differ.

    Example:
        >>> a = TensorDict(w=torch.tensor([1.0, 1.0]))
        >>> b = TensorDict(w=torch.tensor([4.0, 0.0]))
        >>> average_gradients([a, b], weights=[3, 1])["w"].tolist()
        [1.75, 0.75]
    """
    if len(grads) == 0:
        raise ValueError("grads must hold at least one gradient TensorDict, got an empty sequence")
    weights = [1.0] * len(grads) if weights is None else [float(w) for w in weights]
    if len(weights) != len(grads):
        raise ValueError(
            f"weights must have one entry per gradient ({len(grads)}), got {len(weights)}"
        )
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all 0, got {weights}")
    keys = _leaf_keys(grads[0])
    for i, grad in enumerate(grads[1:], start=1):
        if _leaf_keys(grad) != keys:
            raise ValueError(
                f"grads[{i}] has keys {sorted(_leaf_keys(grad))}, grads[0] has {sorted(keys)}"
            )
    total = sum(weights)
    scales = [w / total for w in weights]
    return grads[0].apply(
        lambda *tensors: sum(s * t for s, t in zip(scales, tensors, strict=True)), *grads[1:]
    )


def _leaf_keys(td: TensorDictBase) -> set[tuple[str, ...]]:
    return {_as_tuple(key) for key in td.keys(include_nested=True, leaves_only=True)}


def _as_tuple(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
