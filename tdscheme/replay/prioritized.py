"""Prioritized replay that loads with any torch: torchrl's sampler, or the same sampler on a numpy sum tree.

torchrl's :class:`~torchrl.data.PrioritizedSampler` keeps its priorities in segment trees
of its C++ extension (``torchrl._torchrl``), built against one torch version; with another
torch the extension does not load and the sampler raises ``SumSegmentTreeFp32 is not
available`` (pytorch/rl#3508). :func:`prioritized_sampler` returns torchrl's sampler where
the extension loads and :class:`SumTreeSampler` where it does not: torchrl's own sampler
class (its sampling, importance weights, priority updates, max priority, ``alpha`` /
``beta`` setters and state dicts all run unchanged) over :class:`SegmentTree`, a numpy
segment tree with the extension's interface (``query``, ``scan_lower_bound``, indexing),
vectorized over a batch of indices (one numpy call per tree level, never a Python loop
per sample). Which one a process uses is logged once.

:func:`prioritized_buffer` builds a ``TensorDictReplayBuffer`` over it (torchrl's
``TensorDictPrioritizedReplayBuffer`` builds torchrl's sampler unconditionally).

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    >>> sampler = SumTreeSampler(max_capacity=4, alpha=1.0, beta=1.0)
    >>> buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
    >>> _ = buffer.extend(TensorDict({"obs": torch.arange(4.0)}, [4]))
    >>> buffer.update_priority(torch.arange(4), torch.tensor([0.0, 0.0, 0.0, 5.0]))
    >>> sample = buffer.sample(8)
    >>> sample["index"].tolist()  # all the mass is on frame 3 (the others hold eps)
    [3, 3, 3, 3, 3, 3, 3, 3]
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import prioritized as torchrl_prioritized

from tdscheme.validation import invalid

__all__ = [
    "SegmentTree",
    "SumTreeSampler",
    "extension_loads",
    "prioritized_buffer",
    "prioritized_sampler",
]

logger = logging.getLogger(__name__)

#: the sampler class this process uses, logged the first time it is chosen
_CHOSEN: list[str] = []


class SegmentTree:
    """A sum or min segment tree over ``size`` leaves with the interface of torchrl's C++ trees.

    Leaves start at the operation's neutral element (0 for ``"sum"``, ``inf`` for
    ``"min"``), as the extension's do. Nodes are held in float64 whatever ``dtype`` reads
    return, so a sum over a million priorities does not drift. A batch of writes
    rewrites each level's touched parents in one numpy call; single writes (torchrl's
    ``loads`` sets leaves one by one) only mark the tree stale, rebuilt in one pass at the
    next query.

    Args:
        size: the number of leaves (the buffer's capacity).
        operation: ``"sum"`` or ``"min"``.
        dtype: the numpy dtype of values read back (float32 like ``SumSegmentTreeFp32``).

    Example:
        >>> tree = SegmentTree(5, "sum")
        >>> tree[np.array([0, 2, 4])] = np.array([1.0, 2.0, 3.0])
        >>> tree.query(0, 5), tree.query(1, 3)
        (6.0, 2.0)
        >>> tree.scan_lower_bound(np.array([0.5, 1.5, 3.5, 7.0])).tolist()
        [0, 2, 4, 5]
    """

    def __init__(self, size: int, operation: str = "sum", dtype: Any = np.float32) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise invalid("size", size, "an int >= 1")
        if operation not in ("sum", "min"):
            raise invalid("operation", operation, "'sum' or 'min'")
        self._size = size
        self._operation = operation
        self._ufunc = np.add if operation == "sum" else np.minimum
        self._neutral = 0.0 if operation == "sum" else np.inf
        self._dtype = np.dtype(dtype)
        self._leaves = 1 << max(0, (size - 1).bit_length())  # the first leaf's node number
        self._nodes = np.full(2 * self._leaves, self._neutral, dtype=np.float64)
        self._stale = False

    @property
    def size(self) -> int:
        """The number of leaves."""
        return self._size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            return float(self._nodes[self._leaf(int(index))])
        leaves = self._leaf_array(index)
        return self._nodes[leaves].astype(self._dtype).reshape(np.shape(leaves))

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, (int, np.integer)):
            self._nodes[self._leaf(int(index))] = float(value)
            self._stale = True
            return
        leaves = self._leaf_array(index).reshape(-1)
        values = np.asarray(torch.as_tensor(value).detach().cpu(), dtype=np.float64)
        if values.size == leaves.size:
            values = values.reshape(-1)
        # a repeated index keeps its last value, as the extension's sequential writes do
        self._nodes[leaves] = np.broadcast_to(values, leaves.shape)
        if not self._stale:
            self._update_parents(leaves)

    def query(self, left: int, right: int) -> float:
        """The sum (or min) of leaves ``[left, right)``."""
        left, right = int(left), int(right)
        if not 0 <= left <= right <= self._size:
            raise invalid("left, right", (left, right), f"0 <= left <= right <= {self._size}")
        self._rebuild_if_stale()
        result = self._neutral
        left += self._leaves
        right += self._leaves
        while left < right:
            if left & 1:
                result = self._ufunc(result, self._nodes[left])
                left += 1
            if right & 1:
                right -= 1
                result = self._ufunc(result, self._nodes[right])
            left >>= 1
            right >>= 1
        return float(result)

    def scan_lower_bound(self, value: Any) -> np.ndarray:
        """For each mass in ``value``: the first leaf whose running sum reaches it (``size`` past the total).

        Raises:
            TypeError: on a min tree.
        """
        if self._operation != "sum":
            raise TypeError("scan_lower_bound needs a sum tree")
        self._rebuild_if_stale()
        mass = np.array(torch.as_tensor(value).detach().cpu(), dtype=np.float64, ndmin=1)
        past_total = mass > self._nodes[1]
        node = np.ones(mass.shape, dtype=np.int64)
        for _ in range(self._leaves.bit_length() - 1):  # one level a step, root to leaves
            left = node << 1
            left_sum = self._nodes[left]
            go_right = mass > left_sum
            mass = np.where(go_right, mass - left_sum, mass)
            node = left + go_right
        index = node - self._leaves
        index[past_total] = self._size
        return index

    def _leaf(self, index: int) -> int:
        if not -self._size <= index < self._size:
            raise IndexError(f"index {index} out of range for a tree of {self._size} leaves")
        return index % self._size + self._leaves

    def _leaf_array(self, index: Any) -> np.ndarray:
        index = np.asarray(torch.as_tensor(index).detach().cpu(), dtype=np.int64)
        if index.size and (index.min() < -self._size or index.max() >= self._size):
            raise IndexError(f"an index out of range for a tree of {self._size} leaves")
        return index % self._size + self._leaves

    def _update_parents(self, leaves: np.ndarray) -> None:
        # all nodes of a step are on one level; a parent listed twice is written twice with
        # the same value, cheaper than removing the repeats
        node = leaves >> 1
        for _ in range(self._leaves.bit_length() - 1):
            self._nodes[node] = self._ufunc(self._nodes[2 * node], self._nodes[2 * node + 1])
            node >>= 1

    def _rebuild_if_stale(self) -> None:
        if not self._stale:
            return
        width = self._leaves
        while width > 1:
            half = width >> 1
            children = self._nodes[width : 2 * width]
            self._nodes[half:width] = self._ufunc(children[0::2], children[1::2])
            width = half
        self._stale = False

    def __repr__(self) -> str:
        return f"SegmentTree(size={self._size}, operation={self._operation!r})"


class SumTreeSampler(PrioritizedSampler):
    """torchrl's ``PrioritizedSampler`` over :class:`SegmentTree` instead of its C++ extension.

    Everything but the trees is torchrl's class: arguments, sampling (frequencies
    proportional to ``(p + eps) ** alpha``), importance weights ``(N P(i)) ** -beta``
    normalised by their maximum, ``update_priority`` by index, new frames at the max
    priority, ``alpha`` / ``beta`` annealing, ``state_dict`` / ``dumps``. A learner, a
    ``TensorDictReplayBuffer`` or tdscheme's priority write-back cannot tell it from
    torchrl's (it *is* a ``PrioritizedSampler``). CPU only.

    Args:
        max_capacity: frames the buffer holds.
        alpha: the priority exponent (0: uniform).
        beta: the importance-sampling exponent.
        eps: added to every priority.
        dtype: ``torch.float`` or ``torch.double`` (the dtype of the weights read back).
        reduction: how a multi-dim frame's priority is reduced (torchrl's ``reduction``).
        max_priority_within_buffer: track the max priority among held frames only.

    Raises:
        ValueError: a CUDA ``device`` (the numpy trees are CPU only), or a bad value.
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if device is not None and torch.device(device).type != "cpu":
            raise invalid("device", device, "None or 'cpu' (tdscheme's sum tree runs on CPU)")
        # torchrl's constructor warns that its extension is missing when it is: the point
        # of this class is that it is not needed, so the warning is off for the call
        quiet = torchrl_prioritized.rl_warnings
        torchrl_prioritized.rl_warnings = lambda: False
        try:
            super().__init__(
                max_capacity,
                alpha,
                beta,
                eps,
                dtype=dtype,
                reduction=reduction,
                max_priority_within_buffer=max_priority_within_buffer,
                device=device,
            )
        finally:
            torchrl_prioritized.rl_warnings = quiet

    def _init(self) -> None:
        if self.dtype in (torch.float, torch.float32):
            dtype = np.float32
        elif self.dtype in (torch.double, torch.float64):
            dtype = np.float64
        else:
            raise invalid("dtype", self.dtype, "torch.float or torch.double")
        self._sum_tree = SegmentTree(self._max_capacity, "sum", dtype)
        self._min_tree = SegmentTree(self._max_capacity, "min", dtype)
        self._max_priority = None

    def _maybe_init_from_storage(self, storage: Any) -> None:
        pass  # CPU trees whatever the storage's device (torchrl's would move to CUDA)

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """torchrl's ``update_priority``, after refusing a NaN, infinite or negative priority.

        Raises:
            ValueError: a priority that is not finite and >= 0, naming its frame's index
                (nothing is written: the trees are unchanged).
        """
        values = torch.as_tensor(priority).detach()
        bad = ~torch.isfinite(values) | (values < 0)
        if bool(bad.any()):
            flat = bad.reshape(-1).nonzero()[0].item()
            where = torch.as_tensor(index).reshape(-1)
            at = where[flat].item() if where.numel() > flat else where.reshape(-1)[0].item()
            raise ValueError(
                f"priority={values.reshape(-1)[flat].item()!r} for the frame at index {at} is "
                f"invalid ({int(bad.sum())} of {bad.numel()} bad); accepted: finite priorities "
                f">= 0 (e.g. |td_error|); no priority of this update was written"
            )
        super().update_priority(_flat_index(index, storage), priority, storage=storage)


def _flat_index(index: Any, storage: Any) -> Any:
    """A multi-dim storage's ``[B, ndim]`` index as flat tree positions (others unchanged).

    torchrl ravels such an index with ``np.ravel_multi_index`` over torch tensors, which
    numpy answers with a ``DeprecationWarning`` at every update (a Ray-held buffer's
    ``[time, env]`` storage printed it at each learner step); the same row-major
    arithmetic in torch. Indices of -1 (rows a writer skips) are left to torchrl.
    """
    if storage is None or not isinstance(index, torch.Tensor) or index.ndim < 2:
        return index
    if index.is_floating_point() or bool((index < 0).any()):
        return index
    shape = tuple(getattr(storage, "shape", ()))
    if index.shape[-1] != len(shape):
        return index
    strides = torch.tensor([int(np.prod(shape[dim + 1 :])) for dim in range(len(shape))])
    return (index.long() * strides).sum(-1)


def extension_loads() -> bool:
    """Whether torchrl's C++ segment trees loaded in this process (its own sampler works)."""
    return torchrl_prioritized.SumSegmentTreeFp32 is not None


def prioritized_sampler(
    max_capacity: int, alpha: float, beta: float, eps: float = 1e-8, **kwargs: Any
) -> PrioritizedSampler:
    """torchrl's ``PrioritizedSampler`` where its extension loads, else :class:`SumTreeSampler`.

    The choice is logged once per process (INFO).

    Args:
        max_capacity, alpha, beta, eps: as torchrl's ``PrioritizedSampler``.
        **kwargs: its other keyword arguments (``dtype``, ``reduction``, ...).

    Example:
        >>> isinstance(prioritized_sampler(8, alpha=0.6, beta=0.4), PrioritizedSampler)
        True
    """
    cls = PrioritizedSampler if extension_loads() else SumTreeSampler
    if cls.__name__ not in _CHOSEN:
        _CHOSEN.append(cls.__name__)
        why = (
            "torchrl's C++ extension loads"
            if cls is PrioritizedSampler
            else "torchrl's C++ extension does not load with this torch: tdscheme's numpy sum tree"
        )
        logger.info("prioritized replay: %s (%s)", cls.__name__, why)
    return cls(max_capacity, alpha, beta, eps, **kwargs)


def prioritized_buffer(
    *,
    size: int,
    batch_size: int,
    alpha: float = 0.6,
    beta: float = 0.4,
    eps: float = 1e-8,
    priority_key: str = "td_error",
    storage: Any = None,
    **kwargs: Any,
) -> TensorDictReplayBuffer:
    """A ``TensorDictReplayBuffer`` sampling by priority (torchrl's sampler, or tdscheme's where it will not load).

    What ``TensorDictPrioritizedReplayBuffer(alpha=, beta=, storage=, batch_size=)`` builds,
    through :func:`prioritized_sampler`.

    Args:
        size: frames held (a ``LazyTensorStorage`` of this size unless ``storage`` is given).
        batch_size: frames per ``sample()``.
        alpha, beta, eps: the sampler's exponents and floor.
        priority_key: the key of the priorities (the loss's ``td_error``).
        storage: a storage of ``size`` frames to use instead.
        **kwargs: more ``TensorDictReplayBuffer`` keyword arguments.

    Example:
        >>> buffer = prioritized_buffer(size=100, batch_size=8)
        >>> buffer.sampler.max_size
        100
    """
    storage = LazyTensorStorage(size) if storage is None else storage
    sampler = prioritized_sampler(size, alpha, beta, eps)
    return TensorDictReplayBuffer(
        storage=storage, sampler=sampler, batch_size=batch_size, priority_key=priority_key, **kwargs
    )
