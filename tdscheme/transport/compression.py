"""lz4 compression of raw leaf bytes for the transport codec, and which leaves to compress.

The codec compresses the raw bytes of a tensor leaf (never a text encoding of them) into a
1-D ``uint8`` numpy array, so a compressed leaf still travels as one out-of-band buffer.
The lz4 frame format is used: it has no input size limit and records the content size,
which :func:`decompress_bytes` checks against the size the codec header expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lz4.frame
import numpy as np
from tensordict import NestedKey

__all__ = ["LeafSelector", "compress_bytes", "decompress_bytes"]


def compress_bytes(data: np.ndarray | memoryview | bytes) -> np.ndarray:
    """Compresses the raw bytes of ``data`` with lz4 (frame format, fastest level).

    Args:
        data: a C-contiguous numpy array of any dtype and shape, or any C-contiguous
            buffer (``bytes``, ``memoryview``). Only its raw bytes are used.

    Returns:
        The lz4 frame as a 1-D ``uint8`` numpy array (read-only: it views the bytes
        returned by lz4, without a copy).

    Raises:
        ValueError: if ``data`` is not C-contiguous.

    Example:
        >>> import numpy as np
        >>> raw = np.zeros(4096, dtype=np.float32)
        >>> packed = compress_bytes(raw)
        >>> packed.dtype, packed.ndim, packed.nbytes < raw.nbytes
        (dtype('uint8'), 1, True)
        >>> bool((decompress_bytes(packed, raw.nbytes).view(np.float32) == raw).all())
        True
    """
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError(
            "compress_bytes needs C-contiguous data; got a non-contiguous buffer of shape "
            f"{view.shape} (call np.ascontiguousarray first)"
        )
    return np.frombuffer(lz4.frame.compress(view.cast("B")), dtype=np.uint8)


def decompress_bytes(data: np.ndarray | memoryview | bytes, nbytes: int) -> np.ndarray:
    """Decompresses an lz4 frame made by :func:`compress_bytes` and checks its size.

    Args:
        data: the lz4 frame (a 1-D ``uint8`` array or any bytes-like buffer).
        nbytes: the number of raw bytes the frame must decompress to.

    Returns:
        The raw bytes as a writable 1-D ``uint8`` numpy array of length ``nbytes``.

    Raises:
        ValueError: if ``data`` is not a valid lz4 frame, or decompresses to a size other
            than ``nbytes``.

    Example:
        >>> import numpy as np
        >>> packed = compress_bytes(np.arange(6, dtype=np.int64))
        >>> decompress_bytes(packed, 48).view(np.int64)
        array([0, 1, 2, 3, 4, 5])
    """
    try:
        raw = lz4.frame.decompress(memoryview(data).cast("B"), return_bytearray=True)
    except RuntimeError as err:
        raise ValueError(
            f"decompress_bytes got {memoryview(data).nbytes} bytes that are not a valid lz4 "
            f"frame: {err}"
        ) from err
    if len(raw) != nbytes:
        raise ValueError(
            f"lz4 frame decompressed to {len(raw)} bytes, but {nbytes} bytes were expected "
            "(corrupt or mismatched payload buffer)"
        )
    return np.frombuffer(raw, dtype=np.uint8)


class LeafSelector:
    """Decides which leaves to compress, from the codec's ``compress`` argument.

    Args:
        compress: ``True`` (every leaf), ``False`` (none), or a sequence of keys. A string
            or 1-tuple names a leaf or sub-TensorDict at any depth; a longer tuple is an
            exact path from the root, selecting that leaf or everything under it.

    Raises:
        TypeError: if ``compress`` is not a bool or a sequence of str / tuple-of-str keys
            (a bare string is refused: write ``["pixels"]``).
        ValueError: if a key is the empty tuple.

    Example:
        >>> selector = LeafSelector(["pixels", ("next", "obs")])
        >>> selector(("next", "pixels")), selector(("next", "obs")), selector(("obs",))
        (True, True, False)
        >>> bool(LeafSelector(False)), bool(LeafSelector([]))
        (False, False)
    """

    def __init__(self, compress: bool | Sequence[NestedKey]) -> None:
        self.compress = compress
        self._all, self._names, self._paths = _parse_compress(compress)
        self._cache: dict[tuple[str, ...], bool] = {}

    def __bool__(self) -> bool:
        """Whether any leaf can be selected at all."""
        return self._all or bool(self._names or self._paths)

    def __call__(self, key: tuple[str, ...]) -> bool:
        """Whether the leaf at nested ``key`` (a tuple of str) is to be compressed."""
        if self._all:
            return True
        selected = self._cache.get(key)
        if selected is None:
            selected = any(part in self._names for part in key) or any(
                key[: len(path)] == path for path in self._paths
            )
            self._cache[key] = selected
        return selected

    def __repr__(self) -> str:
        return f"LeafSelector({self.compress!r})"


def _parse_compress(compress: Any) -> tuple[bool, frozenset[str], tuple[tuple[str, ...], ...]]:
    """Splits ``compress`` into (all?, names matched at any depth, exact path prefixes)."""
    if isinstance(compress, bool):
        return compress, frozenset(), ()
    if isinstance(compress, Sequence) and not isinstance(compress, (str, bytes)):
        names, paths = set(), []
        for key in compress:
            if isinstance(key, str):
                names.add(key)
            elif isinstance(key, tuple) and key and all(isinstance(part, str) for part in key):
                if len(key) == 1:
                    names.add(key[0])
                else:
                    paths.append(key)
            elif isinstance(key, tuple) and not key:
                raise ValueError("compress keys must be non-empty; got the empty tuple ()")
            else:
                break
        else:
            return False, frozenset(names), tuple(paths)
    raise TypeError(
        "compress must be a bool or a sequence of keys (str or tuple of str), e.g. True, "
        f"['pixels'] or [('next', 'pixels')]; got {compress!r} of type {type(compress).__name__}"
    )
