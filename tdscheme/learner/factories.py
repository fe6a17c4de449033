"""The policy and learner factories, and :func:`build_learner`: one way to call them.

The Scheme's driver, every learner-group rank and every gradient worker build their
modules and Learner with :func:`build_learner`, so each process gets the same modules
from the same factories, and a factory that returns the wrong thing fails the same
way everywhere.

Example:
    >>> from torch import nn
    >>> build_learner(lambda: nn.Linear(2, 2), lambda actor: 3)
    Traceback (most recent call last):
    ...
    TypeError: learner_factory must return a tdscheme Learner, got int
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from tdscheme.learner.learner import Learner

__all__ = ["LearnerFactory", "PolicyFactory", "build_learner"]

PolicyFactory = Callable[[], "nn.Module | Mapping[str, nn.Module]"]
LearnerFactory = Callable[..., Learner]


def build_learner(
    policy_factory: PolicyFactory, learner_factory: LearnerFactory
) -> tuple[dict[str, nn.Module], Learner]:
    """Builds the modules and the Learner over them, in this process.

    Returns:
        ``(modules, learner)``: ``policy_factory()`` as a dict with an ``"actor"``
        (one module is taken as ``{"actor": module}``), and ``learner_factory(**modules)``.

    Raises:
        TypeError: a factory returns the wrong type.
        ValueError: ``policy_factory`` returns a dict without an ``"actor"``.
    """
    modules = _as_modules(policy_factory())
    learner = learner_factory(**modules)
    if not isinstance(learner, Learner):
        raise TypeError(
            f"learner_factory must return a tdscheme Learner, got {type(learner).__name__}"
        )
    return modules, learner


def _as_modules(built: Any) -> dict[str, nn.Module]:
    if isinstance(built, nn.Module):
        return {"actor": built}
    if not isinstance(built, Mapping):
        raise TypeError(
            f"policy_factory must return an nn.Module or a dict of them such as "
            f"{{'actor': ..., 'critic': ...}}, got {type(built).__name__}"
        )
    if "actor" not in built:
        raise ValueError(
            f"policy_factory returned a dict with keys {sorted(built)}; accepted: a dict "
            f"with an 'actor' key (the module the collectors run)"
        )
    return dict(built)
