"""One storage for all of a batch's leaves, so that the codec sends the batch as one buffer.

Ray pickles each out-of-band buffer of a reply, places each in the object store and
unpickles each on arrival: for a batch of a few thousand small frames (CartPole's 17
leaves of 4-64 KB) that per-buffer work costs more than the bytes. A worker whose batch
buffer is reused from batch to batch lays it out once with :func:`one_storage_`: every
tensor leaf becomes a view of one ``uint8`` storage (each 64-byte aligned), its values
copied. From then on :meth:`~tdscheme.transport.codec.TensorDictCodec.encode` finds every
leaf in that storage and sends the storage once, with each leaf's byte offset
(:func:`storage_of`); the decoded leaves view it (:func:`~tdscheme.transport.leaves.slice_to_leaf`),
as they viewed their own buffers.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> done = torch.zeros(64, 1, dtype=torch.bool)
    >>> td = TensorDict({"obs": torch.randn(64, 3), "next": {"done": done}}, [64])
    >>> storage_of([td["obs"], td["next", "done"]]) is None  # two storages
    True
    >>> one_storage_(td)
    True
    >>> storage_of([td["obs"], td["next", "done"]]).nbytes  # one: 768 + 64 bytes
    832
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["ALIGN", "leaf_bytes", "one_storage_", "storage_of"]

#: bytes each leaf's offset in the storage is a multiple of
ALIGN = 64


def leaf_bytes(tensor: torch.Tensor) -> int:
    """The bytes of ``tensor``'s elements."""
    return tensor.numel() * tensor.element_size()


def one_storage_(td: TensorDictBase) -> bool:
    """Lays out ``td``'s tensor leaves as views of one new storage (values copied); in place.

    Returns:
        Whether it did: only CPU, strided leaves that need no grad are gathered, and
        only when there are two or more of them and nothing else.
    """
    leaves = [
        (key, value) for key, value in td.items(True, True) if isinstance(value, torch.Tensor)
    ]
    if len(leaves) < 2 or not all(_gatherable(value) for _, value in leaves):
        return False
    offsets, end = [], 0
    for _, value in leaves:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + leaf_bytes(value)
    arena = torch.empty(end, dtype=torch.uint8)
    for (key, value), start in zip(leaves, offsets, strict=True):
        view = _view(arena, start, value.dtype, value.shape)
        view.copy_(value)
        td.set(key, view)
    return True


def storage_of(tensors: Sequence[torch.Tensor]) -> np.ndarray | None:
    """The one storage every tensor of ``tensors`` views, as ``uint8`` numpy, or ``None``.

    ``None`` unless there are two or more non-empty tensors, all on the CPU and contiguous
    in the same storage, whose bytes make at least 90 % of it (a few slices of a larger
    tensor are sent as themselves, not with the rest of it).
    """
    tensors = [t for t in tensors if t.numel()]
    if len(tensors) < 2 or tensors[0].device.type != "cpu":
        return None
    storage = tensors[0].untyped_storage()
    start, total = storage.data_ptr(), 0
    for t in tensors:  # a view's storage starts its offset before it (cheaper than its storage)
        if t.data_ptr() - t.storage_offset() * t.element_size() != start or not t.is_contiguous():
            return None
        total += leaf_bytes(t)
    if total < 0.9 * storage.nbytes():
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


def _view(arena: torch.Tensor, start: int, dtype: torch.dtype, shape: torch.Size) -> torch.Tensor:
    count = math.prod(shape) * dtype.itemsize
    return arena[start : start + count].view(dtype).view(shape)


def _gatherable(value: torch.Tensor) -> bool:
    return value.device.type == "cpu" and value.layout is torch.strided and not value.requires_grad
