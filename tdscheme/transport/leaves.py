"""One tensor leaf <-> one numpy buffer: the per-leaf half of the transport codec.

A leaf travels as a numpy array with its own shape and dtype; a dtype numpy lacks
(``bfloat16``, ``float8_*``, ``complex32``) travels as a same-size integer *carrier* and is
reinterpreted, never converted, on arrival. A compressed leaf travels as a 1-D ``uint8``
lz4 frame (see :mod:`tdscheme.transport.compression`). Also here: the helpers that
densify a TensorDict before encoding and build one, unchecked, from decoded leaves.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    is_non_tensor,
)

from tdscheme.transport.compression import decompress_bytes

__all__ = [
    "CARRIERS",
    "LZ4",
    "RAW",
    "array_to_leaf",
    "dense_",
    "dtype_name",
    "leaf_to_array",
    "names_of",
    "new_tensordict",
    "non_tensor_stack",
    "slice_to_leaf",
]

RAW, LZ4 = "raw", "lz4"
#: the integer dtype of each element size: a dtype numpy lacks travels as it, bits unchanged
CARRIERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def leaf_to_array(tensor: torch.Tensor, key: tuple[str, ...]) -> np.ndarray:
    """Returns a C-contiguous CPU numpy array holding ``tensor``'s bytes, copying only if needed.

    A contiguous CPU tensor is viewed, not copied. Other tensors are moved to CPU, made
    contiguous, detached and have their conjugate/negative bits resolved first.

    Args:
        tensor: a strided tensor of any dtype and device.
        key: the leaf's nested key, for error messages.

    Returns:
        An array with the tensor's shape and its numpy dtype, or a same-size integer carrier
        dtype when numpy lacks the dtype.

    Raises:
        TypeError: if the tensor cannot be carried (e.g. a sparse or nested layout); the
            message names ``key``.

    Example:
        >>> import torch
        >>> tensor = torch.ones(2, 3, dtype=torch.bfloat16)
        >>> array = leaf_to_array(tensor, ("h",))
        >>> array.dtype, array.shape, array.ctypes.data == tensor.data_ptr()
        (dtype('int16'), (2, 3), True)
    """
    if tensor.is_contiguous():
        try:
            return tensor.numpy()  # a view: no copy
        except (TypeError, RuntimeError):
            pass
    try:
        if tensor.layout is not torch.strided:
            raise TypeError(f"layout {tensor.layout} is not supported (strided only)")
        tensor = tensor.detach().cpu().contiguous().resolve_conj().resolve_neg()
        try:
            return tensor.numpy()
        except TypeError:  # numpy lacks the dtype (bfloat16, float8, complex32)
            return tensor.view(CARRIERS[tensor.element_size()]).numpy()
    except (TypeError, RuntimeError, KeyError) as err:
        raise TypeError(
            f"cannot encode tensor at key {key} (dtype {tensor.dtype}, layout {tensor.layout}, "
            f"device {tensor.device}): {err}"
        ) from err


def array_to_leaf(
    buffer: Any, dtype: str, shape: tuple[int, ...], codec: str, key: tuple[str, ...]
) -> torch.Tensor:
    """Rebuilds a leaf from its buffer; a ``"raw"`` buffer is wrapped, not copied.

    Args:
        buffer: the numpy array made by :func:`leaf_to_array`, or its lz4 frame.
        dtype: the leaf's torch dtype name, as :func:`dtype_name` gives it.
        shape: the leaf's shape.
        codec: ``"raw"`` or ``"lz4"``.
        key: the leaf's nested key, for error messages.

    Returns:
        The tensor, sharing memory with ``buffer`` when ``codec`` is ``"raw"``.

    Raises:
        ValueError: if ``dtype`` or ``codec`` is unknown, or the buffer's dtype, shape or
            decompressed size disagrees with ``dtype`` and ``shape``; the message names ``key``.

    Example:
        >>> import torch
        >>> tensor = torch.arange(4, dtype=torch.bfloat16)
        >>> array = leaf_to_array(tensor, ("x",))
        >>> array_to_leaf(array, "bfloat16", (4,), "raw", ("x",))
        tensor([0., 1., 2., 3.], dtype=torch.bfloat16)
    """
    torch_dtype, np_dtype, carried = _buffer_dtype(dtype)
    if codec == RAW:
        if buffer.shape != shape or buffer.dtype != np_dtype:
            raise ValueError(
                f"buffer for leaf {key} has dtype {buffer.dtype} and shape {buffer.shape}; the "
                f"header says {dtype} (carried as {np_dtype}) with shape {shape}"
            )
        array = buffer
    elif codec == LZ4:
        raw = decompress_bytes(buffer, math.prod(shape) * np_dtype.itemsize)
        array = raw.view(np_dtype).reshape(shape)
    else:
        raise ValueError(f"leaf {key} has unknown codec {codec!r}; accepted: {RAW!r}, {LZ4!r}")
    tensor = torch.from_numpy(array)
    return tensor.view(torch_dtype) if carried else tensor


def slice_to_leaf(
    arena: np.ndarray, offset: int, dtype: str, shape: tuple[int, ...], key: tuple[str, ...]
) -> torch.Tensor:
    """Rebuilds a leaf from its bytes at ``offset`` of a ``uint8`` arena (a view, no copy).

    Raises:
        ValueError: the leaf's bytes run past the arena's end, or ``dtype`` is unknown; the
            message names ``key``.

    Example:
        >>> arena = np.arange(16, dtype=np.uint8)
        >>> slice_to_leaf(arena, 8, "int16", (2, 2), ("x",)).shape
        torch.Size([2, 2])
    """
    _, np_dtype, _ = _buffer_dtype(dtype)
    count = math.prod(shape) * np_dtype.itemsize
    if offset < 0 or offset + count > arena.nbytes:
        raise ValueError(
            f"leaf {key} of {count} bytes at offset {offset} runs past the "
            f"{arena.nbytes}-byte arena"
        )
    array = arena[offset : offset + count].view(np_dtype).reshape(shape)
    return array_to_leaf(array, dtype, shape, RAW, key)


@functools.cache
def dtype_name(dtype: torch.dtype) -> str:
    """The plain-string name of a torch dtype, as the payload header records it.

    Args:
        dtype: any torch dtype.

    Returns:
        The name of the ``torch`` attribute holding ``dtype``.

    Example:
        >>> dtype_name(torch.bfloat16)
        'bfloat16'
    """
    return str(dtype).removeprefix("torch.")


@functools.cache
@functools.cache
def _buffer_dtype(name: str) -> tuple[torch.dtype, np.dtype, bool]:
    """(torch dtype, numpy dtype of its buffer, whether that is a carrier) for ``name``."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"payload header names an unknown torch dtype {name!r}")
    probe = torch.empty(0, dtype=dtype)
    try:
        return dtype, probe.numpy().dtype, False
    except TypeError:
        return dtype, probe.view(CARRIERS[probe.element_size()]).numpy().dtype, True


def non_tensor_stack(values: list[Any], batch_size: Sequence[int]) -> NonTensorStack:
    """Rebuilds a NonTensorStack of the given batch size from its ``tolist()`` output."""
    if not values:  # an empty stack only keeps its trailing dims through ``batch_size``
        return NonTensorStack(batch_size=tuple(batch_size[1:]))
    if len(batch_size) == 1:
        return NonTensorStack(*(NonTensorData(data=value) for value in values))
    return NonTensorStack(*(non_tensor_stack(value, batch_size[1:]) for value in values))


def new_tensordict(
    source: dict[str, Any], batch_size: tuple[int, ...], names: Any, device: str | None
) -> TensorDict:
    """Builds a TensorDict from already-validated leaves, then moves it to ``device``.

    ``TensorDict._new_unsafe`` skips the constructor's per-leaf checks (about 14x faster
    for a 10-leaf batch); :func:`tdscheme.transport.payload.rebuild` has checked every leaf
    against its batch size.
    """
    if names is not None and len(names) != len(batch_size):
        raise ValueError(f"dim names {names} do not match batch size {batch_size}")
    target = None if device is None else torch.device(device)
    on_cpu = target is None or target.type == "cpu"
    build = getattr(TensorDict, "_new_unsafe", TensorDict)
    td = build(
        source,
        batch_size=torch.Size(batch_size),
        device=target if on_cpu else None,
        names=None if names is None else list(names),
    )
    return td if on_cpu else td.to(target)


def dense_(td: TensorDictBase) -> TensorDictBase:
    """Densifies lazy stacks (non-tensor stacks excepted); other TensorDicts pass through."""
    if isinstance(td, LazyStackedTensorDict) and not is_non_tensor(td):
        return td.contiguous()
    return td


def names_of(td: TensorDictBase) -> tuple[str | None, ...] | None:
    """Dim names of ``td`` as a tuple, or ``None`` when it has none."""
    try:
        names = td.names
    except (RuntimeError, ValueError):
        return None
    if names is None or all(name is None for name in names):
        return None
    return tuple(names)
