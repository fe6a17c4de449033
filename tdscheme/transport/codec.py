"""TensorDict <-> (header, numpy buffers) codec for zero-copy transport through Ray.

A :class:`Payload` holds a small header of plain Python values (keys, dtypes, shapes, batch
sizes, dim names, devices, compression flags, non-tensor values) and one numpy array per
tensor leaf. Pickle protocol 5, which Ray uses, ships numpy arrays as out-of-band buffers,
so a batch crosses the object store without being copied into the pickle stream, and
:meth:`TensorDictCodec.decode` wraps the received arrays with ``torch.from_numpy`` without
copying them either.

The header's layout and how a payload is rebuilt are in :mod:`tdscheme.transport.payload`.
Keys are tuples of strings. How one leaf becomes one buffer (dtype carriers for
``bfloat16`` and friends, lz4 frames) is in :mod:`tdscheme.transport.leaves`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NestedKey, NonTensorStack, TensorDict, TensorDictBase, is_non_tensor

from tdscheme.transport.arena import one_storage_, storage_of
from tdscheme.transport.compression import LeafSelector, compress_bytes
from tdscheme.transport.leaves import LZ4, RAW, dense_, dtype_name, leaf_to_array, names_of
from tdscheme.transport.next_fold import FOLD, fold_leaf, foldable_keys
from tdscheme.transport.payload import (
    FORMAT,
    NON_TENSOR,
    NON_TENSOR_STACK,
    SLICE,
    TD,
    TENSOR,
    Payload,
    rebuild,
)

__all__ = ["Payload", "TensorDictCodec", "decode_tensordict", "encode_tensordict"]


class TensorDictCodec:
    """Encodes TensorDicts into :class:`Payload` objects and decodes them back, copy-free.

    Encoding moves leaves to CPU and makes them contiguous only where they are not already
    (a contiguous CPU leaf is shared, not copied), densifies lazy stacks, and records nested
    keys, dtypes (every torch dtype, ``bfloat16`` and ``float8`` included), shapes, batch
    sizes, dim names, devices and non-tensor values. Decoding rebuilds an identical
    TensorDict whose tensors view the payload buffers (unless compressed) and moves it to
    the recorded device (``None`` stays ``None``).

    Caveats: ``requires_grad`` is dropped; leaves of a TensorDict whose ``device`` is
    ``None`` come back on CPU; tensors decoded from read-only buffers (as Ray delivers
    them) share that memory, so ``clone()`` before writing to them in place.

    Args:
        compress: ``False`` (default) sends raw bytes; ``True`` lz4-compresses every leaf;
            a sequence of keys compresses only the matching leaves. A string (or 1-tuple)
            such as ``"pixels"`` matches a leaf or sub-TensorDict of that name at any depth,
            e.g. ``("next", "pixels")`` too; a longer tuple such as ``("next", "pixels")``
            matches that exact path and everything under it. A leaf whose compressed bytes
            are not smaller than its raw bytes is sent raw.
        min_compress_bytes: leaves smaller than this many bytes are never compressed.
        fold_next_bytes: ``("next", key)`` leaves of at least this many bytes per frame are
            sent as their differences from ``key`` (:mod:`tdscheme.transport.next_fold`);
            ``None``: none.
        keep_in_one_storage: the caller encodes the same TensorDict, refilled, again and
            again (a worker's batch buffer): when its raw leaves are not all in one storage,
            :meth:`encode` lays them out in one (:func:`~tdscheme.transport.arena.one_storage_`,
            in place, after the payload is made) so that the next payload sends one buffer.
            After two such layouts in a row that did not give one, it stops trying.

    Raises:
        TypeError: if ``compress`` is not a bool or a sequence of keys (str or tuple of
            str), or ``min_compress_bytes`` is not an int.
        ValueError: if ``min_compress_bytes`` is negative or a key is an empty tuple.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> pixels = torch.zeros(4, 8, 8, dtype=torch.uint8)
        >>> td = TensorDict({"obs": torch.randn(4, 3), "next": {"pixels": pixels}}, [4])
        >>> codec = TensorDictCodec(compress=["pixels"])
        >>> payload = codec.encode(td)
        >>> payload.nbytes < 4 * 3 * 4 + 4 * 8 * 8
        True
        >>> out = codec.decode(payload)
        >>> bool((out == td).all()), out.batch_size
        (True, torch.Size([4]))
    """

    def __init__(
        self,
        compress: bool | Sequence[NestedKey] = False,
        *,
        min_compress_bytes: int = 0,
        fold_next_bytes: int | None = None,
        keep_in_one_storage: bool = False,
    ) -> None:
        self._selector = LeafSelector(compress)
        self._keep_in_one_storage = keep_in_one_storage
        self._layouts = 0  # layouts in a row not followed by a one-storage payload
        _check_bytes("min_compress_bytes", min_compress_bytes)
        if fold_next_bytes is not None:
            _check_bytes("fold_next_bytes", fold_next_bytes)
        self._min_compress_bytes = min_compress_bytes
        self._fold_next_bytes = fold_next_bytes

    def __repr__(self) -> str:
        return (
            f"TensorDictCodec(compress={self._selector.compress!r}, "
            f"min_compress_bytes={self._min_compress_bytes}, "
            f"fold_next_bytes={self._fold_next_bytes})"
        )

    def encode(self, td: TensorDictBase) -> Payload:
        """Encodes ``td`` into a :class:`Payload` without copying contiguous CPU leaves.

        Args:
            td: the TensorDict to encode (lazy stacks are densified first).

        Returns:
            The payload: a header and one numpy array per tensor leaf.

        Raises:
            TypeError: if ``td`` is not a TensorDict, or holds a leaf the codec cannot
                carry (a sparse or nested tensor, or a tensorclass other than non-tensor
                data); the message names the key.
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(
                f"td must be a tensordict.TensorDictBase; got {type(td).__name__}: {td!r:.80}"
            )
        td = dense_(td)
        device = td.device
        if device is not None and device.type != "cpu":
            td = td.to("cpu")
        entries: list[tuple[Any, ...]] = []
        buffers: list[np.ndarray] = []
        raws: list[tuple[int, int, torch.Tensor]] = []
        folds = foldable_keys(td, self._fold_next_bytes)
        self._encode_into(td, (), entries, buffers, folds and (td, folds), raws)
        header = {
            "format": FORMAT,
            "batch_size": tuple(td.batch_size),
            "names": names_of(td),
            "device": None if device is None else str(device),
            "entries": entries,
        }
        arena = storage_of([tensor for _, _, tensor in raws])
        if arena is not None:  # every raw leaf views one storage: it is sent once
            buffers = _slices(entries, buffers, raws, arena)
            header["arena"] = True
            self._layouts = 0
        payload = Payload(header, tuple(buffers))
        if arena is None and self._keep_in_one_storage and self._layouts < 2 and len(raws) > 1:
            # only where every leaf went raw: a folded or compressed one is sent apart anyway
            if len(raws) == sum(1 for entry in entries if entry[0] in (TENSOR, FOLD)):
                self._layouts += 1
                one_storage_(td)  # for the next encode: the payload views the leaves it replaces
        return payload

    def decode(self, payload: Payload) -> TensorDict:
        """Rebuilds the TensorDict of ``payload``; raw buffers are wrapped, not copied.

        Args:
            payload: a payload made by :meth:`encode` (possibly after a pickle round trip).

        Returns:
            A TensorDict identical to the encoded one, on the recorded device.

        Raises:
            TypeError: if ``payload`` is not a :class:`Payload`.
            ValueError: if the payload is malformed: an unknown format, a header and buffer
                count mismatch, or a buffer whose dtype, shape or size disagrees with the
                header. The message says which key is wrong.
        """
        if not isinstance(payload, Payload):
            raise TypeError(f"payload must be a Payload; got {type(payload).__name__}")
        header = payload.header
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            found = header.get("format") if isinstance(header, dict) else type(header).__name__
            raise ValueError(f"payload header format must be {FORMAT!r}; got {found!r}")
        try:
            return rebuild(header, payload.buffers)
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed payload: {type(err).__name__}: {err}") from err

    def _encode_into(
        self,
        td: TensorDictBase,
        prefix: tuple[str, ...],
        entries: list[tuple[Any, ...]],
        buffers: list[np.ndarray],
        folds: tuple[TensorDictBase, set[tuple[str, ...]]] | None = None,
        raws: list[tuple[int, int, torch.Tensor]] | None = None,
    ) -> None:
        for name, value in td.items():
            key = (*prefix, name)
            if folds and key in folds[1]:  # sent as its differences from key[1:]
                root = folds[0]
                entry, arrays = fold_leaf(key, root.get(key[1:]), value, root.batch_dims)
                entries.append(entry)
                buffers.extend(arrays)
            elif isinstance(value, torch.Tensor):
                array = leaf_to_array(value, key)
                entry = (TENSOR, key, dtype_name(value.dtype), array.shape, RAW)
                if (
                    self._selector
                    and array.nbytes
                    and array.nbytes >= self._min_compress_bytes
                    and self._selector(key)
                ):
                    packed = compress_bytes(array)
                    if packed.nbytes < array.nbytes:
                        array, entry = packed, (*entry[:4], LZ4)
                if raws is not None and entry[4] == RAW and value.device.type == "cpu":
                    raws.append((len(entries), len(buffers), value))
                entries.append(entry)
                buffers.append(array)
            elif is_non_tensor(value):
                if isinstance(value, NonTensorStack):
                    entries.append((NON_TENSOR_STACK, key, value.tolist(), tuple(value.batch_size)))
                else:
                    entries.append((NON_TENSOR, key, value.data, tuple(value.batch_size)))
            elif isinstance(value, TensorDictBase):
                value = dense_(value)
                device = None if value.device is None else str(value.device)
                entries.append((TD, key, tuple(value.batch_size), names_of(value), device))
                self._encode_into(value, key, entries, buffers, folds, raws)
            else:
                raise TypeError(
                    f"cannot encode key {key} of type {type(value).__name__}: the codec carries "
                    "tensors, sub-TensorDicts and non-tensor data (convert tensorclasses "
                    "with .to_tensordict())"
                )


def encode_tensordict(td: TensorDictBase, compress: bool | Sequence[NestedKey] = False) -> Payload:
    """Encodes ``td`` with a one-off :class:`TensorDictCodec`.

    Args:
        td: the TensorDict to encode.
        compress: which leaves to lz4-compress, as for :class:`TensorDictCodec`.

    Returns:
        The payload.

    Raises:
        TypeError: as :class:`TensorDictCodec` and :meth:`TensorDictCodec.encode` do.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> payload = encode_tensordict(TensorDict({"a": torch.arange(3)}, [3]))
        >>> decode_tensordict(payload)["a"]
        tensor([0, 1, 2])
    """
    return TensorDictCodec(compress).encode(td)


def decode_tensordict(payload: Payload) -> TensorDict:
    """Decodes a :class:`Payload` made by any :class:`TensorDictCodec`.

    Args:
        payload: the payload, compressed or not.

    Returns:
        The rebuilt TensorDict (raw buffers are wrapped, not copied).

    Raises:
        TypeError: if ``payload`` is not a :class:`Payload`.
        ValueError: if the payload is malformed (see :meth:`TensorDictCodec.decode`).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.ones(2, dtype=torch.bfloat16)}, [2])
        >>> decode_tensordict(encode_tensordict(td, compress=True))["a"].dtype
        torch.bfloat16
    """
    return TensorDictCodec().decode(payload)


def _slices(
    entries: list[tuple[Any, ...]],
    buffers: list[np.ndarray],
    raws: list[tuple[int, int, torch.Tensor]],
    arena: np.ndarray,
) -> list[np.ndarray]:
    """Rewrites the raw leaves' entries as slices of ``arena``; returns the buffers: it, then the rest."""
    gathered = set()
    for entry_index, buffer_index, tensor in raws:
        if tensor.numel():  # an empty leaf keeps its (empty) buffer
            _, key, dtype, shape, _ = entries[entry_index]
            offset = tensor.storage_offset() * tensor.element_size()
            entries[entry_index] = (SLICE, key, dtype, shape, offset)
            gathered.add(buffer_index)
    return [arena, *(b for i, b in enumerate(buffers) if i not in gathered)]


def _check_bytes(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 0; got {value!r} of type {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0; got {value}")
