"""Replay buffers fed by remote workers: what they write, and the Ray-held buffers they write into.

* :mod:`~tdscheme.replay.frames`: the frames a worker writes (cut to a budget, NaN / inf
  left out), in torchrl's layout.
* :mod:`~tdscheme.replay.ray_held`: torchrl's Ray-held buffers, built quiet
  (:func:`~tdscheme.replay.ray_held.ray_buffer_kwargs`), written by workers through
  tdscheme's codec with a time bound, a dead actor named.
* :mod:`~tdscheme.replay.bounded`: the driver's calls on such a buffer, each bounded.
* :mod:`~tdscheme.replay.compact`: a storage keeping each observation (each stacked
  plane) once, torchrl's layout when read.
* :mod:`~tdscheme.replay.prioritized`: prioritized replay with any torch (torchrl's
  sampler where its C++ extension loads, the same sampler on a numpy sum tree elsewhere).
* :mod:`~tdscheme.replay.n_step`: n-step returns each worker computes on its own frames
  before it writes them (each env's last steps held for the next batch).
* :mod:`~tdscheme.replay.sharded`: Ape-X's replay: K prioritized Ray-held shards that
  workers write into, with priorities they compute (:mod:`~tdscheme.replay.priorities`),
  sampled as one buffer.

Used by the collector workers (writes), the driver (a dead worker's last write) and the
off-policy training loop (samples); none of them imports another for it.
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

__all__ = [
    "BoundedRayBuffer",
    "CompactFrameStorage",
    "NStep",
    "QLearningPriority",
    "ShardedReplayBuffer",
    "SumTreeSampler",
    "is_ray_replay_buffer",
    "prioritized_buffer",
    "prioritized_sampler",
    "ray_buffer_kwargs",
]

if typing.TYPE_CHECKING:
    from tdscheme.replay.bounded import BoundedRayBuffer
    from tdscheme.replay.compact import CompactFrameStorage
    from tdscheme.replay.n_step import NStep
    from tdscheme.replay.priorities import QLearningPriority
    from tdscheme.replay.prioritized import SumTreeSampler, prioritized_buffer, prioritized_sampler
    from tdscheme.replay.ray_held import is_ray_replay_buffer, ray_buffer_kwargs
    from tdscheme.replay.sharded import ShardedReplayBuffer

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BoundedRayBuffer": "tdscheme.replay.bounded",
        "CompactFrameStorage": "tdscheme.replay.compact",
        "NStep": "tdscheme.replay.n_step",
        "QLearningPriority": "tdscheme.replay.priorities",
        "ShardedReplayBuffer": "tdscheme.replay.sharded",
        "SumTreeSampler": "tdscheme.replay.prioritized",
        "prioritized_buffer": "tdscheme.replay.prioritized",
        "prioritized_sampler": "tdscheme.replay.prioritized",
        "is_ray_replay_buffer": "tdscheme.replay.ray_held",
        "ray_buffer_kwargs": "tdscheme.replay.ray_held",
    },
)
