"""Each observation once on the wire: ``("next", key)`` rebuilt from ``key`` on arrival.

In a rollout along time (the last batch dim), ``td["next", key][..., t]`` is
``td[key][..., t + 1]`` wherever the episode goes on; it differs only where an episode
ended at ``t`` (step ``t + 1`` starts from a reset observation), and at the last step,
whose next observation is not in the batch. A folded leaf crosses as three buffers in
place of the whole ``("next", key)``: its last step, the positions ``t < T - 1`` where
it differs from ``key[..., t + 1]``, and its values there. The positions come from a
bitwise comparison, not from the done flags, so the rebuilt leaf is the sent one bit
for bit (NaN, ``-0.0``, transforms that edit one side, padded trajectories: all kept);
a leaf that never matches costs its own bytes plus the comparison, nothing is lost.

A leaf is folded when ``key`` and ``("next", key)`` are tensors of the same dtype and
shape, ``"next"`` has the root's batch size, and one frame of it holds at least
``min_frame_bytes`` bytes: rebuilding writes that many bytes per frame on the receiving
side, which pays for itself on pixels, not on a 16-byte CartPole state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdscheme.transport.leaves import CARRIERS, RAW, array_to_leaf, dtype_name, leaf_to_array

__all__ = [
    "FOLD",
    "MIN_FRAME_BYTES",
    "fold_leaf",
    "foldable_keys",
    "folded_keys",
    "unfold_leaf",
]

#: the header entry kind of a folded leaf: ``(FOLD, key, dtype, shape, batch_dims, count)``
FOLD = "fold"

#: the smallest frame collectors fold (``dedup_obs``): below it, rebuilding costs more than it saves
MIN_FRAME_BYTES = 1024


def foldable_keys(td: TensorDictBase, min_frame_bytes: int | None) -> set[tuple[str, ...]]:
    """The ``("next", *key)`` leaves of ``td`` that :func:`fold_leaf` sends folded.

    Args:
        td: a batch whose last batch dim is time.
        min_frame_bytes: the smallest frame (bytes of one batch element of the leaf) to
            fold; ``None``: none.
    """
    if min_frame_bytes is None or td.batch_dims == 0 or td.batch_size[-1] == 0:
        return set()
    nxt = td.get("next", None)
    if not isinstance(nxt, TensorDictBase) or nxt.batch_size != td.batch_size:
        return set()
    out = set()
    for key in nxt.keys(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else tuple(key)
        here, there = td.get(key, None), nxt.get(key)
        if (
            isinstance(here, torch.Tensor)
            and isinstance(there, torch.Tensor)
            and here.dtype == there.dtype
            and here.shape == there.shape
            and here.element_size() in CARRIERS
            and here.dtype not in (torch.complex32, torch.complex64, torch.complex128)
            and _frame_bytes(there, td.batch_dims) >= min_frame_bytes
        ):
            out.add(("next", *key))
    return out


def fold_leaf(
    key: tuple[str, ...], current: torch.Tensor, nxt: torch.Tensor, batch_dims: int
) -> tuple[tuple[Any, ...], list[np.ndarray]]:
    """The header entry and the three buffers (last step, positions, values) of ``nxt``.

    Args:
        key: the ``("next", ...)`` key of ``nxt``.
        current: the leaf at the same key without ``"next"``, same dtype and shape.
        nxt: the leaf to fold.
        batch_dims: the batch dims of both; the last is time.
    """
    rows, steps, frame = _shape3(nxt, batch_dims)
    here = current.detach().cpu().contiguous().reshape(rows, steps, -1)
    per_frame = nxt.detach().cpu().contiguous().reshape(rows, steps, *frame)
    there = per_frame.reshape(rows, steps, -1)
    differ = torch.zeros(rows, max(steps - 1, 0), dtype=torch.bool)
    for row in range(rows):  # most rows hold no episode end: one contiguous comparison each
        a, b = _words(there[row, :-1]), _words(here[row, 1:])
        if not torch.equal(a, b):
            differ[row] = (a != b).any(-1)
    index = differ.flatten().nonzero().flatten()
    values = per_frame[:, :-1][differ]
    last = per_frame[:, -1]
    entry = (FOLD, key, dtype_name(nxt.dtype), tuple(nxt.shape), batch_dims, int(index.numel()))
    buffers = [leaf_to_array(last, key), leaf_to_array(index, key), leaf_to_array(values, key)]
    return entry, buffers


def unfold_leaf(
    entry: tuple[Any, ...], current: torch.Tensor, buffers: Iterable[np.ndarray]
) -> torch.Tensor:
    """Rebuilds the leaf :func:`fold_leaf` sent as ``entry`` and ``buffers`` from ``current``.

    Raises:
        ValueError: ``current``'s shape is not the folded leaf's, or a buffer is malformed.
    """
    _, key, dtype, shape, batch_dims, count = entry
    shape = tuple(shape)
    if tuple(current.shape) != shape:
        raise ValueError(
            f"folded leaf {key} has shape {shape} but the leaf it folds onto has "
            f"{tuple(current.shape)}"
        )
    last_buf, index_buf, values_buf = buffers
    frame = shape[batch_dims:]
    rows, steps = math.prod(shape[: batch_dims - 1]), shape[batch_dims - 1]
    last = array_to_leaf(last_buf, dtype, (rows, *frame), RAW, key)
    index = array_to_leaf(index_buf, "int64", (count,), RAW, key)
    values = array_to_leaf(values_buf, dtype, (count, *frame), RAW, key)
    out = torch.empty((rows, steps, *frame), dtype=current.dtype)
    out[:, :-1] = current.reshape(rows, steps, *frame)[:, 1:]
    out[:, -1] = last
    if count:
        out[index // (steps - 1), index % (steps - 1)] = values
    return out.reshape(shape)


def folded_keys(payload: Any) -> list[str]:
    """The keys a payload carries folded, as ``"next.key"`` strings."""
    entries = payload.header.get("entries", ())
    return [".".join(entry[1]) for entry in entries if entry[0] == FOLD]


def _shape3(leaf: torch.Tensor, batch_dims: int) -> tuple[int, int, tuple[int, ...]]:
    """(rows before time, time steps, the frame's shape) of ``leaf``."""
    shape = tuple(leaf.shape)
    return math.prod(shape[: batch_dims - 1]), shape[batch_dims - 1], shape[batch_dims:]


def _frame_bytes(leaf: torch.Tensor, batch_dims: int) -> int:
    return math.prod(leaf.shape[batch_dims:]) * leaf.element_size()


def _words(x: torch.Tensor) -> torch.Tensor:
    """``x``'s bits as integers (the widest word its frame divides into): a bitwise equality."""
    if x.dtype == torch.bool:
        x = x.view(torch.uint8)
    words = x.view(CARRIERS[x.element_size()])
    width = words.shape[-1] * x.element_size()
    for size in (8, 4, 2):
        if size > x.element_size() and width % size == 0 and words.stride(-1) == 1:
            return words.view(CARRIERS[size])
    return words
