"""The Learner's constructor checks: the device, the optimizer, the policy and the value estimator.

Each function takes what it checks and the loss module's trainable parameters, and
either returns the part the Learner keeps or raises an error naming the argument,
the value and what is accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torchrl.objectives import LossModule
from torchrl.objectives.value import ValueEstimatorBase

__all__ = [
    "OptimizerFactory",
    "SchedulerFactory",
    "ValueEstimator",
    "available_device",
    "build_optimizer",
    "build_scheduler",
    "check_value_estimator",
    "resolve_policy",
    "trainable_parameters",
]

logger = logging.getLogger(__name__)

OptimizerFactory = Callable[[Iterable[nn.Parameter]], Optimizer]
SchedulerFactory = Callable[[Optimizer], LRScheduler]
ValueEstimator = ValueEstimatorBase | Callable[[TensorDictBase], TensorDictBase]


def available_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``; a CUDA device without CUDA is an error."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"config.device={str(device)!r} but torch.cuda.is_available() is False")
    return device


def trainable_parameters(loss_module: Any) -> dict[str, nn.Parameter]:
    """The loss module's parameters that require gradients, by name (at least one)."""
    if not isinstance(loss_module, LossModule):
        raise TypeError(
            f"loss_module must be a torchrl LossModule (e.g. ClipPPOLoss, A2CLoss), "
            f"got {type(loss_module).__name__}"
        )
    params = {n: p for n, p in loss_module.named_parameters() if p.requires_grad}
    if not params:
        raise ValueError(
            f"loss_module {type(loss_module).__name__} has no parameter with requires_grad"
        )
    return params


def check_value_estimator(
    value_estimator: Any, params: dict[str, nn.Parameter], device: torch.device
) -> ValueEstimator | None:
    """The value estimator on ``device``; warns when its value network never trains."""
    if value_estimator is None:
        return None
    if not callable(value_estimator):
        raise TypeError(
            f"value_estimator must be a torchrl ValueEstimatorBase (e.g. GAE) or a "
            f"callable TensorDict -> TensorDict, got {type(value_estimator).__name__}"
        )
    if isinstance(value_estimator, nn.Module):
        value_estimator = value_estimator.to(device)
    value_network = getattr(value_estimator, "value_network", None)
    if isinstance(value_network, nn.Module):
        value_params = list(value_network.parameters())
        if value_params and not _shares(value_params, params):
            logger.warning(
                "value_estimator.value_network shares no parameter with the loss module, so "
                "its values never train; build it with the critic the loss was built with"
            )
    return value_estimator


def resolve_policy(
    policy: Any, loss_module: LossModule, params: dict[str, nn.Parameter]
) -> nn.Module:
    """``policy``, or the loss module's actor (or value network), sharing trained parameters."""
    if policy is None:
        for attr in ("actor_network", "actor", "value_network"):
            policy = getattr(loss_module, attr, None)
            if isinstance(policy, nn.Module):
                break
        else:
            raise ValueError(
                f"policy=None but {type(loss_module).__name__} has no actor_network, "
                f"actor or value_network; pass policy=<the module collectors run>"
            )
    if not isinstance(policy, nn.Module):
        raise TypeError(f"policy must be an nn.Module or None, got {type(policy).__name__}")
    policy_params = list(policy.parameters())
    if policy_params and not _shares(policy_params, params):
        raise ValueError(
            f"policy {type(policy).__name__} shares no parameter with the loss module, so "
            f"policy_weights() would never change; pass the actor the loss was built with"
        )
    return policy


def build_optimizer(optimizer: Any, params: dict[str, nn.Parameter], lr: float) -> Optimizer:
    """``optimizer`` as given, built by its factory, or Adam at ``lr`` when ``None``."""
    if optimizer is None:
        return torch.optim.Adam(params.values(), lr=lr)
    if isinstance(optimizer, Optimizer):
        return optimizer
    if callable(optimizer):
        built = optimizer(params.values())
        if not isinstance(built, Optimizer):
            raise TypeError(
                f"optimizer factory must return a torch.optim.Optimizer, got {type(built).__name__}"
            )
        return built
    raise TypeError(
        f"optimizer must be a torch.optim.Optimizer, a callable params -> Optimizer "
        f"or None (Adam), got {type(optimizer).__name__}"
    )


def build_scheduler(lr_scheduler: Any, optimizer: Optimizer) -> LRScheduler | None:
    """The scheduler ``lr_scheduler`` builds over ``optimizer`` (``None``: none)."""
    if lr_scheduler is None:
        return None
    if not callable(lr_scheduler):
        raise TypeError(
            f"lr_scheduler must be a callable Optimizer -> LRScheduler, "
            f"got {type(lr_scheduler).__name__}"
        )
    return lr_scheduler(optimizer)


def _shares(params: list[nn.Parameter], trained: dict[str, nn.Parameter]) -> bool:
    ids = {id(p) for p in trained.values()}
    return any(id(p) in ids for p in params)
