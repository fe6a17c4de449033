"""Gradient workers: Ray actors that collect with their own collectors and compute gradients.

Three modes, as in pytorchrl's Scheme and RLlib's A3C: ``synchronous`` (one
gradient per worker, averaged by frame count, applied once on the driver,
weights broadcast), ``asynchronous`` (each gradient applied as it arrives, fresh
weights back to its sender) and ``decentralized`` synchronous (the workers
all-reduce over torch.distributed gloo and each applies the same update).

Example:
    >>> from tdscheme.gradient_workers import GradientWorkersConfig
    >>> GradientWorkersConfig(num_grad_workers=2, decentralized=True).mode
    'decentralized'
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "AsynchronousCoordinator": "tdscheme.gradient_workers.asynchronous",
    "DecentralizedCoordinator": "tdscheme.gradient_workers.decentralized",
    "GradientCoordinator": "tdscheme.gradient_workers.coordinator",
    "GradientResult": "tdscheme.gradient_workers.worker",
    "GradientWorker": "tdscheme.gradient_workers.worker",
    "GradientWorkerSpec": "tdscheme.gradient_workers.config",
    "GradientWorkersConfig": "tdscheme.gradient_workers.config",
    "SynchronousCoordinator": "tdscheme.gradient_workers.synchronous",
    "build_gradient_coordinator": "tdscheme.gradient_workers.build",
}

__all__ = [
    "AsynchronousCoordinator",
    "DecentralizedCoordinator",
    "GradientCoordinator",
    "GradientResult",
    "GradientWorker",
    "GradientWorkerSpec",
    "GradientWorkersConfig",
    "SynchronousCoordinator",
    "build_gradient_coordinator",
]

if typing.TYPE_CHECKING:
    from tdscheme.gradient_workers.asynchronous import AsynchronousCoordinator
    from tdscheme.gradient_workers.build import build_gradient_coordinator
    from tdscheme.gradient_workers.config import GradientWorkersConfig, GradientWorkerSpec
    from tdscheme.gradient_workers.coordinator import GradientCoordinator
    from tdscheme.gradient_workers.decentralized import DecentralizedCoordinator
    from tdscheme.gradient_workers.synchronous import SynchronousCoordinator
    from tdscheme.gradient_workers.worker import GradientResult, GradientWorker

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
