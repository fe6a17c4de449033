"""Snapshots of a Learner: CPU copies of its weights and state, and loading them back with checks.

A snapshot leaves the Learner's process (weights to collectors and gradient workers)
or goes to disk (a checkpoint's state), so it holds detached CPU copies only and is
checked against the module it is loaded into, naming what differs.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 1)
    >>> weights = cpu_weights(layer)
    >>> sorted(weights.keys())
    ['bias', 'weight']
    >>> load_weights_(torch.nn.Linear(2, 1), weights)
    >>> optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    >>> state = training_state(layer, optimizer, None, version=3)
    >>> load_training_state_(state, loss_module=layer, optimizer=optimizer, lr_scheduler=None)
    3
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.optim import Optimizer

__all__ = [
    "cpu_module",
    "cpu_weights",
    "load_training_state_",
    "load_weights_",
    "to_cpu",
    "training_state",
]

#: the keys of :func:`training_state`
STATE_KEYS = frozenset({"version", "loss_module", "optimizer", "lr_scheduler"})


def cpu_module(module: nn.Module) -> nn.Module:
    """A copy of ``module`` on the CPU that shares no storage with it: what collectors get.

    Collector workers run the policy on the CPU and receive CPU weights
    (:func:`cpu_weights`), wherever the learner trains: the module handed to them is
    never the learner's own (on a GPU, pickling it would ask every worker for CUDA;
    on the CPU, it would share the learner's tensors in this process).

    Example:
        >>> layer = torch.nn.Linear(2, 1)
        >>> copy = cpu_module(layer)
        >>> copy.weight.data_ptr() != layer.weight.data_ptr(), copy.weight.device.type
        (True, 'cpu')
    """
    return copy.deepcopy(module).to("cpu")


def cpu_weights(module: nn.Module) -> TensorDict:
    """``TensorDict.from_module(module)``, detached and copied to CPU (safe to send)."""
    weights = TensorDict.from_module(module)
    return weights.apply(lambda t: t.detach().to("cpu", copy=True)).to_tensordict()


def load_weights_(module: nn.Module, weights: TensorDictBase) -> None:
    """Copies ``weights`` (from :func:`cpu_weights` of a like module) into ``module``, in place.

    Raises:
        TypeError: ``weights`` is not a TensorDict.
        ValueError: keys differ from the module's parameters and buffers.
    """
    if not isinstance(weights, TensorDictBase):
        raise TypeError(f"weights must be a TensorDict, got {type(weights).__name__}")
    target = TensorDict.from_module(module).data
    expected = set(target.keys(include_nested=True, leaves_only=True))
    given = set(weights.keys(include_nested=True, leaves_only=True))
    if given != expected:
        raise ValueError(
            f"weights must have the keys of Learner.weights(); missing "
            f"{sorted(map(str, expected - given))}, unexpected {sorted(map(str, given - expected))}"
        )
    with torch.no_grad():
        target.update_(weights)


def training_state(
    loss_module: nn.Module, optimizer: Optimizer, lr_scheduler: Any, *, version: int
) -> dict[str, Any]:
    """Everything needed to resume training: loss module, optimizer, scheduler, version.

    Returns:
        Plain dicts of CPU tensors, numbers and lists, a snapshot that
        ``torch.save`` writes and ``torch.load(weights_only=True)`` reads.
    """
    return {
        "version": version,
        "loss_module": to_cpu(dict(loss_module.state_dict())),
        "optimizer": to_cpu(optimizer.state_dict()),
        "lr_scheduler": None if lr_scheduler is None else lr_scheduler.state_dict(),
    }


def load_training_state_(
    state: dict[str, Any], *, loss_module: nn.Module, optimizer: Optimizer, lr_scheduler: Any
) -> int:
    """Restores :func:`training_state` into the parts, in place.

    Returns:
        The version the state was saved at.

    Raises:
        ValueError: keys are missing, or the state has a scheduler state and
            ``lr_scheduler`` is ``None`` (or the other way round).
    """
    missing = STATE_KEYS - set(state)
    if missing:
        raise ValueError(f"state is missing {sorted(missing)}; pass Learner.state_dict()")
    if (state["lr_scheduler"] is None) != (lr_scheduler is None):
        raise ValueError(
            f"state has lr_scheduler={'None' if state['lr_scheduler'] is None else 'a state'}"
            f" but this Learner has lr_scheduler={lr_scheduler!r}; build both alike"
        )
    loss_module.load_state_dict(state["loss_module"])
    optimizer.load_state_dict(state["optimizer"])
    if lr_scheduler is not None:
        lr_scheduler.load_state_dict(state["lr_scheduler"])
    return int(state["version"])


def to_cpu(obj: Any) -> Any:
    """A copy of a nested dict / list / tuple of tensors with every tensor detached on CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(value) for value in obj)
    return obj
