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
The writer of a batch may say where the two differ by construction
(:func:`note_differences`: the lean rollout's staged loop, which wrote both leaves); the
comparison is then skipped for as long as neither leaf was replaced or written to
since (torch's version counters, which every in-place write bumps, views included).

A leaf is folded when ``key`` and ``("next", key)`` are tensors of the same dtype and
shape, ``"next"`` has the root's batch size, and one frame of it holds at least
``min_frame_bytes`` bytes: rebuilding writes that many bytes per frame on the receiving
side, which pays for itself on pixels, not on a 16-byte CartPole state.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from collections import OrderedDict
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
    "frame_bytes",
    "note_differences",
    "unfold_leaf",
]

#: the header entry kind of a folded leaf: ``(FOLD, key, dtype, shape, batch_dims, count)``
FOLD = "fold"

#: the smallest frame collectors fold (``dedup_obs``): below it, rebuilding costs more than it saves
MIN_FRAME_BYTES = 1024

#: id of a ``("next", key)`` leaf -> what :func:`note_differences` recorded of it (the newest few)
_NOTED: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
_NOTED_KEPT = 16


def note_differences(current: torch.Tensor, nxt: torch.Tensor, differ: torch.Tensor) -> None:
    """Records that ``nxt`` differs from ``current`` one step on at most where ``differ`` is set.

    For a writer that made both leaves: :func:`fold_leaf` then sends ``nxt`` at those
    positions without comparing the two, as long as both are the same tensors, unwritten
    since (their version counters). A position set where the two are equal costs one
    frame of bytes; one left unset where they differ would lose it: only a writer that
    knows, by construction, may say so.

    Args:
        current: the leaf at the key without ``"next"``.
        nxt: the ``("next", key)`` leaf, same shape.
        differ: bool ``[rows, steps - 1]`` (rows: the batch dims before time, flattened).
    """
    _NOTED[id(nxt)] = (
        weakref.ref(nxt), nxt._version, weakref.ref(current), current._version, differ
    )  # fmt: skip
    _NOTED.move_to_end(id(nxt))
    while len(_NOTED) > _NOTED_KEPT:
        _NOTED.popitem(last=False)


def _noted_differences(current: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor | None:
    """What :func:`note_differences` said of these two leaves, if it still holds."""
    noted = _NOTED.get(id(nxt))
    if noted is None:
        return None
    nxt_ref, nxt_version, current_ref, current_version, differ = noted
    if (
        nxt_ref() is nxt
        and current_ref() is current
        and nxt._version == nxt_version
        and current._version == current_version
    ):
        return differ
    return None


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
            and frame_bytes(there, td.batch_dims) >= min_frame_bytes
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
    differ = _noted_differences(current, nxt)
    per_frame = nxt.detach().cpu().contiguous().reshape(rows, steps, *frame)
    if differ is None or tuple(differ.shape) != (rows, max(steps - 1, 0)):
        here = current.detach().cpu().contiguous().reshape(rows, steps, -1)
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
    rebuilt = _REBUILT.take(shape, current.dtype)
    out = rebuilt.view(rows, steps, *frame)
    out[:, :-1] = current.reshape(rows, steps, *frame)[:, 1:]
    out[:, -1] = last
    if count:
        out[index // (steps - 1), index % (steps - 1)] = values
    return rebuilt


class _Rebuilt:
    """The memory of rebuilt leaves, reused once nothing outside holds it.

    A fresh tensor of a pixel batch's size is fresh pages for the OS to map
    (``malloc`` hands such sizes to ``mmap`` and back on free): its first write
    costs several times a second one (58 MB: ~50 ms against ~10 ms here). So the
    last few leaves of each shape stay here, and one is handed out again only when
    neither it, its storage nor any view of them is referenced outside (the
    tensor's and the storage's reference counts, the storage's use count: views
    and numpy arrays hold it) and it is not in shared memory (another process may
    have mapped it). Leaves under ``MIN_BYTES`` are allocated each time.
    """

    MIN_BYTES = 1 << 20
    KEPT = 3  # per shape: the batch a loop holds, the one being rebuilt, one for stacking

    def __init__(self) -> None:
        self._kept: dict[tuple[Any, ...], list[list[Any]]] = {}
        self._lock = threading.Lock()
        self.reused = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if math.prod(shape) * dtype.itemsize < self.MIN_BYTES:
            return torch.empty(shape, dtype=dtype)
        with self._lock:
            kept = self._kept.setdefault((shape, dtype), [])
            for entry in kept:
                if _holders(entry) == entry[1] and not entry[0].is_shared():
                    self.reused += 1
                    return entry[0]
            if len(kept) >= self.KEPT:
                return torch.empty(shape, dtype=dtype)
            kept.append([torch.empty(shape, dtype=dtype), None])
            kept[-1][1] = _holders(kept[-1])
            return kept[-1][0]


def _holders(entry: list[Any]) -> tuple[int, ...]:
    """What references ``entry[0]`` (see :class:`_Rebuilt`); compared with its count when new."""
    storage = entry[0].untyped_storage()
    return (
        sys.getrefcount(entry[0]),
        torch._C._storage_Use_Count(storage._cdata),
        sys.getrefcount(storage),
    )


_REBUILT = _Rebuilt()


def folded_keys(payload: Any) -> list[str]:
    """The keys a payload carries folded, as ``"next.key"`` strings."""
    entries = payload.header.get("entries", ())
    return [".".join(entry[1]) for entry in entries if entry[0] == FOLD]


def _shape3(leaf: torch.Tensor, batch_dims: int) -> tuple[int, int, tuple[int, ...]]:
    """(rows before time, time steps, the frame's shape) of ``leaf``."""
    shape = tuple(leaf.shape)
    return math.prod(shape[: batch_dims - 1]), shape[batch_dims - 1], shape[batch_dims:]


def frame_bytes(leaf: torch.Tensor, batch_dims: int) -> int:
    """Bytes of one frame of ``leaf`` (one element of its ``batch_dims`` batch dims)."""
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
