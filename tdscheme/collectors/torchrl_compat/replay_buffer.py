"""A Ray-held torchrl replay buffer that stays off the collectors' CPUs and off the terminal.

torchrl's ``RayReplayBuffer`` runs the buffer in an actor of its own, and two of
that actor's defaults get in a small machine's way: it takes 1 CPU (on 2 cores,
room for one collector less: the other one is never placed), and Ray prints an
actor's repr as the prefix of its output, where torchrl's repr spans ten lines
that spill onto the driver's terminal when the actor starts. Give
``RayReplayBuffer`` :func:`ray_buffer_kwargs` (what the presets do)::

    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
    from tdscheme.collectors import ray_buffer_kwargs

    buffer = RayReplayBuffer(storage=functools.partial(LazyTensorStorage, 100_000),
                             batch_size=256, **ray_buffer_kwargs())

Example:
    >>> kwargs = ray_buffer_kwargs()
    >>> kwargs["replay_buffer_cls"].__name__, kwargs["remote_config"]["num_cpus"]
    ('OneLineReprReplayBuffer', 0)
    >>> from torchrl.data import LazyTensorStorage
    >>> kwargs["replay_buffer_cls"](storage=LazyTensorStorage(8), batch_size=4)
    ReplayBuffer(LazyTensorStorage, batch_size=4)
"""

from __future__ import annotations

import logging
from typing import Any

from torchrl.data import ReplayBuffer

from tdscheme.log_levels import driver_log_level

__all__ = ["OneLineReprReplayBuffer", "one_line_repr", "ray_buffer_kwargs", "ray_buffer_options"]


def _repr(self: ReplayBuffer) -> str:
    # torchrl's class: past the one-line subclasses (and Ray's copy of them, same name)
    name = next(c.__name__ for c in type(self).__mro__ if not c.__name__.startswith("OneLineRepr"))
    return f"{name}({type(self._storage).__name__}, batch_size={self._batch_size})"


class OneLineReprReplayBuffer(ReplayBuffer):
    """torchrl's ``ReplayBuffer`` with a one-line repr, for the actor of a Ray-held buffer."""

    __repr__ = _repr


def one_line_repr(cls: type[ReplayBuffer]) -> type[ReplayBuffer]:
    """A subclass of the torchrl buffer class ``cls`` whose repr is one line.

    Example:
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> quiet = one_line_repr(TensorDictReplayBuffer)
        >>> quiet.__name__, quiet(storage=LazyTensorStorage(8), batch_size=2)
        ('OneLineReprTensorDictReplayBuffer', TensorDictReplayBuffer(LazyTensorStorage, batch_size=2))
    """
    if cls is ReplayBuffer:
        return OneLineReprReplayBuffer
    return type(f"OneLineRepr{cls.__name__}", (cls,), {"__repr__": _repr})


def ray_buffer_options(num_cpus: float = 0) -> dict[str, Any]:
    """``RayReplayBuffer``'s ``remote_config``: ``num_cpus`` (0: it only stores) and quiet logs.

    Its actor logs at the driver's level (:mod:`tdscheme.log_levels`), as the
    collector workers do: torchrl's INFO records stay in its process.
    """
    level = logging.getLevelName(driver_log_level())
    return {"num_cpus": num_cpus, "runtime_env": {"env_vars": {"RL_LOGGING_LEVEL": level}}}


def ray_buffer_kwargs(
    replay_buffer_cls: type[ReplayBuffer] = ReplayBuffer, *, num_cpus: float = 0
) -> dict[str, Any]:
    """Keyword arguments for ``RayReplayBuffer``: a one-line repr, ``num_cpus``, quiet logs.

    Args:
        replay_buffer_cls: torchrl's buffer class the actor holds (``RayReplayBuffer``'s
            argument of that name), e.g. ``TensorDictReplayBuffer``.
        num_cpus: CPUs the actor takes from Ray (0 for one that only stores; give it
            more when it does work, e.g. a prioritized sampler under many writers).
    """
    return {
        "replay_buffer_cls": one_line_repr(replay_buffer_cls),
        "remote_config": ray_buffer_options(num_cpus),
    }
