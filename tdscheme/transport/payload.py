"""The payload a TensorDict crosses Ray as: its header's layout, and the TensorDict rebuilt from it.

:class:`~tdscheme.transport.codec.TensorDictCodec` writes a :class:`Payload`; :func:`rebuild`
reads one back, wrapping each raw buffer with ``torch.from_numpy`` (no copy).

Header layout (``format`` ``"tdscheme.codec/1"``): ``batch_size``, ``names`` (``None``
when unnamed), ``device`` (``None`` or a device string) for the root, and ``entries``, a
list in pre-order (parents before children, insertion order kept) of tuples:

* ``("tensor", key, dtype, shape, codec)``: the next buffer; ``dtype`` is the torch dtype
  name, ``codec`` is ``"raw"`` or ``"lz4"``;
* ``("td", key, batch_size, names, device)``: a sub-TensorDict (possibly empty);
* ``("non_tensor", key, value, batch_size)``: a ``NonTensorData``;
* ``("non_tensor_stack", key, values, batch_size)``: a ``NonTensorStack`` (nested lists);
* ``("fold", key, dtype, shape, batch_dims, count)``: a ``("next", ...)`` leaf sent as its
  differences from the leaf one step later (three buffers: :mod:`tdscheme.transport.next_fold`);
* ``("slice", key, dtype, shape, offset)``: a leaf at byte ``offset`` of the arena, no buffer
  of its own. With ``"arena": True`` in the header, the first buffer is one storage every
  raw leaf views (:mod:`tdscheme.transport.arena`): sent once, instead of one buffer a leaf.

Keys are tuples of strings. How one leaf becomes one buffer (dtype carriers for
``bfloat16`` and friends, lz4 frames) is in :mod:`tdscheme.transport.leaves`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict

from tdscheme.transport.leaves import array_to_leaf, new_tensordict, non_tensor_stack, slice_to_leaf
from tdscheme.transport.next_fold import FOLD, unfold_leaf

__all__ = [
    "FORMAT", "NON_TENSOR", "NON_TENSOR_STACK", "SLICE", "TD", "TENSOR", "Payload", "rebuild",
]  # fmt: skip

FORMAT = "tdscheme.codec/1"
#: the kinds of header entries (see the module)
TENSOR, TD, NON_TENSOR, NON_TENSOR_STACK, SLICE = (
    "tensor", "td", "non_tensor", "non_tensor_stack", "slice",
)  # fmt: skip
_NOT_WRITABLE = "The given NumPy array is not writable"


@dataclass(frozen=True, repr=False)
class Payload:
    """An encoded TensorDict: a small plain-Python header and one numpy array per leaf.

    Build it with :meth:`~tdscheme.transport.codec.TensorDictCodec.encode`; the header's
    layout is in the module docstring and is private to the codec.

    Attributes:
        header: keys, dtypes, shapes, batch sizes, dim names, devices, compression flags
            and non-tensor values.
        buffers: one numpy array per tensor leaf, in header order.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdscheme.transport import encode_tensordict
        >>> payload = encode_tensordict(TensorDict({"obs": torch.zeros(8, 4)}, [8]))
        >>> payload
        Payload(leaves=1, nbytes=128, batch_size=(8,))
    """

    header: dict[str, Any]
    buffers: tuple[np.ndarray, ...]

    @property
    def nbytes(self) -> int:
        """Bytes that cross the wire out of band: the sum of the buffers' sizes."""
        return sum(buffer.nbytes for buffer in self.buffers)

    def __repr__(self) -> str:
        batch_size = self.header.get("batch_size")
        return f"Payload(leaves={len(self.buffers)}, nbytes={self.nbytes}, batch_size={batch_size})"


def rebuild(header: dict[str, Any], buffers: Sequence[np.ndarray]) -> TensorDict:
    """The TensorDict of a payload's ``header`` and ``buffers`` (raw buffers wrapped, not copied).

    Raises:
        ValueError: a buffer count, shape or batch size that disagrees with the header.
        KeyError, IndexError, TypeError, AttributeError: a malformed header (the codec's
            :meth:`~tdscheme.transport.codec.TensorDictCodec.decode` says so).
    """
    root_batch = tuple(header["batch_size"])
    arena = None
    if header.get("arena"):
        arena, buffers = buffers[0], buffers[1:]
    # path -> (source dict, batch size, device) for the root and every sub-TensorDict
    nodes: dict[tuple[str, ...], tuple[dict[str, Any], tuple[int, ...], Any]] = {
        (): ({}, root_batch, header["device"])
    }
    subtds: list[tuple[tuple[str, ...], tuple[int, ...], Any, Any]] = []
    entries = header["entries"]
    count = sum({TENSOR: 1, FOLD: 3}.get(entry[0], 0) for entry in entries)
    folded: list[tuple[Any, dict[str, Any], list[np.ndarray]]] = []
    if count != len(buffers):
        raise ValueError(
            f"payload header describes {count} tensor leaves but the payload has "
            f"{len(buffers)} buffers"
        )
    arrays = [*buffers, arena] if arena is not None else buffers
    read_only = any(not array.flags.writeable for array in arrays)
    index = 0
    with warnings.catch_warnings() if read_only else contextlib.nullcontext():
        if read_only:  # Ray hands out read-only arrays; torch warns about wrapping them
            warnings.filterwarnings("ignore", message=_NOT_WRITABLE, category=UserWarning)
        for entry in entries:
            kind, key = entry[0], entry[1]
            source, batch_size, device = nodes[key[:-1]]
            if kind == TENSOR:
                value = array_to_leaf(buffers[index], entry[2], entry[3], entry[4], key)
                index += 1
                if entry[3][: len(batch_size)] != batch_size:
                    raise ValueError(
                        f"leaf {key} has shape {entry[3]}, which does not start with its "
                        f"TensorDict's batch size {batch_size}"
                    )
            elif kind == SLICE:
                if arena is None:
                    raise ValueError(f"leaf {key} is a slice of an arena the payload lacks")
                value = slice_to_leaf(arena, entry[4], entry[2], entry[3], key)
            elif kind == FOLD:  # rebuilt below, once every other leaf is in place
                folded.append((entry, source, list(buffers[index : index + 3])))
                index += 3
                value = None
            elif kind == TD:
                _, _, sub_batch, names, sub_device = entry
                sub_batch = tuple(sub_batch)
                if sub_batch[: len(batch_size)] != batch_size:
                    raise ValueError(
                        f"sub-TensorDict {key} has batch size {sub_batch}, which does not "
                        f"start with its parent's batch size {batch_size}"
                    )
                nodes[key] = ({}, sub_batch, sub_device)
                subtds.append((key, sub_batch, names, sub_device))
                value = None  # placeholder keeps the key order; filled in below
            elif kind == NON_TENSOR:
                value = NonTensorData(data=entry[2], batch_size=entry[3], device=device)
            elif kind == NON_TENSOR_STACK:
                value = non_tensor_stack(entry[2], entry[3])
            else:
                raise ValueError(f"payload header has an entry of unknown kind {kind!r}")
            source[key[-1]] = value
    for entry, source, arrays in folded:
        key = entry[1]
        source[key[-1]] = unfold_leaf(entry, _leaf(nodes, key[1:]), arrays)
    for key, batch_size, names, device in reversed(subtds):
        nodes[key[:-1]][0][key[-1]] = new_tensordict(nodes[key][0], batch_size, names, device)
    return new_tensordict(nodes[()][0], root_batch, header["names"], header["device"])


def _leaf(nodes: dict[tuple[str, ...], Any], key: tuple[str, ...]) -> torch.Tensor:
    """The decoded leaf at ``key`` (its TensorDict not built yet)."""
    value = nodes[key[:-1]][0].get(key[-1]) if key[:-1] in nodes else None
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"folded leaf {('next', *key)} has no leaf {key} to fold onto")
    return value
