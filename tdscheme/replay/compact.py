"""A replay storage that keeps each observation once, and gives torchrl's layout back bit for bit.

torchrl's collectors write each transition with its observation twice, ``obs`` and
``("next", obs)``; with frame stacking (``CatFrames``) each plane of a frame is in up to
eight places. :class:`CompactFrameStorage` keeps, per transition, the newest plane of each
observation key and rebuilds the rest when sampled from the transitions beside it (as
DQN's replay does): ``("next", obs)`` of a transition is the next slot's ``obs``, the older
planes of a stack are the slot before's. What cannot be rebuilt goes to a side pool: the
final observations of ended episodes and of the last step of each write, the first stack of
an episode (or of a write). Each link is checked when written, on the bits of the values,
so what comes out is what went in whatever the env's reset mode, truncation or write order,
with no NaN placeholder (torchrl's ``compact_obs`` loses the final observations). A slot
overwritten while a neighbour still leans on it hands its values to that neighbour first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensor_collection
from tensordict.utils import NestedKey, unravel_key
from torchrl.data import LazyTensorStorage

__all__ = ["CompactFrameStorage"]

_INTERNAL = "_compact"
_STATE_FILE = "compact_frames.pt"
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class _Pool:
    """Whole values kept aside, by slot: grows by doubling, slots freed for reuse."""

    def __init__(self) -> None:
        self.data: torch.Tensor | None = None
        self.used = torch.zeros(0, dtype=torch.bool)

    def put(self, values: torch.Tensor) -> torch.Tensor:
        """Stores ``values`` (one per row); returns the slots they went to."""
        if values.shape[0] == 0:
            return torch.zeros(0, dtype=torch.long)
        free = (~self.used).nonzero().flatten()
        if free.numel() < values.shape[0]:
            old = self.used.numel()
            cap = max(16, 2 * old, old + values.shape[0])
            data = values.new_empty((cap, *values.shape[1:]))
            if self.data is not None:
                data[:old] = self.data
            self.data = data
            self.used = torch.cat([self.used, torch.zeros(cap - old, dtype=torch.bool)])
            free = (~self.used).nonzero().flatten()
        slots = free[: values.shape[0]]
        self.data.index_copy_(0, slots, values)
        self.used[slots] = True
        return slots

    def free(self, slots: torch.Tensor) -> None:
        self.used[slots[slots >= 0]] = False

    def nbytes(self) -> int:
        return 0 if self.data is None else self.data.numel() * self.data.element_size()

    def state(self) -> dict[str, Any]:
        return {"data": self.data, "used": self.used.clone()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Pool:
        pool = cls()
        pool.data = None if state["data"] is None else state["data"].clone()
        pool.used = state["used"].clone()
        return pool


def _bits(x: torch.Tensor) -> torch.Tensor:
    """``x`` as integers of its size, rows flattened: equality of bits (``-0.0``, NaN kept apart)."""
    if x.is_floating_point() or x.is_complex():
        x = x.contiguous().view(_INT_OF_SIZE[x.element_size()])
    return x.reshape(x.shape[0], -1)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row: ``a`` and ``b`` hold the same bits."""
    if a.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool)
    return (_bits(a) == _bits(b)).all(-1)


class CompactFrameStorage(LazyTensorStorage):
    """torchrl's ``LazyTensorStorage`` keeping each observation once; torchrl's layout when read.

    One transition per slot (``ndim=1``): extend a ``[num_envs, time]`` batch as
    ``batch.reshape(-1)`` (tdscheme's workers do so when they write into a Ray-held
    buffer with this storage). Samplers, writers, ``state_dict`` and ``dumps`` / ``loads``
    work as with torchrl's storage.

    Args:
        max_size: the number of transitions held.
        keys: the observation keys kept once (each must also be in the data under
            ``"next"``). Default: every key the first write holds both at the root and
            under ``"next"`` whose value for one transition has at least ``min_bytes``
            bytes (pixels: rebuilding a small state vector costs more than it saves).
        stack_dim: the dim of each observation along which frames are stacked, newest
            last (torchrl's ``CatFrames(dim=-3)`` for ``[4, 84, 84]``): each plane is
            then kept once. ``None``: no stacking, each observation kept once.
        min_bytes: the size from which ``keys=None`` picks a key.

    Example:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorDictReplayBuffer
        >>> frames = torch.arange(7, dtype=torch.uint8).reshape(7, 1, 1).expand(7, 32, 32)
        >>> steps = TensorDict({"pixels": frames[:-1], "next": {"pixels": frames[1:]}}, [6])
        >>> rb = TensorDictReplayBuffer(storage=CompactFrameStorage(100), batch_size=4)
        >>> rb.extend(steps)  # doctest: +ELLIPSIS
        tensor(...)
        >>> bool((rb[:]["next", "pixels"] == frames[1:]).all())
        True
        >>> rb.storage.pool_sizes()  # one final observation kept aside: the write's last
        {'pixels': {'final': 1}}
    """

    def __init__(
        self,
        max_size: int,
        *,
        keys: Sequence[NestedKey] | None = None,
        stack_dim: int | None = None,
        min_bytes: int = 1024,
    ) -> None:
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 1:
            raise ValueError(f"max_size={max_size!r}: expected an int >= 1")
        if stack_dim is not None and (not isinstance(stack_dim, int) or stack_dim >= 0):
            raise ValueError(
                f"stack_dim={stack_dim!r}: expected None or a negative int, the stacking dim "
                "counted from the right of one observation (CatFrames' dim, e.g. -3)"
            )
        if keys is not None and (isinstance(keys, str) or not len(keys)):
            raise ValueError(f"keys={keys!r}: expected None or a non-empty list of keys")
        super().__init__(max_size)  # on CPU
        self._asked_keys = None if keys is None else [unravel_key(k) for k in keys]
        self.stack_dim = stack_dim
        self.min_bytes = min_bytes
        self.frame_keys: list[Any] | None = None  # resolved at the first write
        self._pools: dict[str, _Pool] = {}
        self._written = torch.zeros(max_size, dtype=torch.bool)

    # -- writing -------------------------------------------------------------------------

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        if not is_tensor_collection(data):
            raise TypeError(
                f"CompactFrameStorage.set: data of type {type(data).__name__}; expected a TensorDict"
            )
        if isinstance(cursor, int):
            cursor, data = [cursor], data.unsqueeze(0)
        index = self._slots(cursor, self.max_size)
        if data.ndim != 1 or data.shape[0] != index.numel():
            raise ValueError(
                f"CompactFrameStorage holds one transition per slot: got data of batch size "
                f"{list(data.shape)} for {index.numel()} slots; extend a [num_envs, time] batch "
                "as batch.reshape(-1)"
            )
        if index.numel() > self.max_size:  # a write past the capacity: its last transitions win
            index, data = index[-self.max_size :], data[-self.max_size :]
        if index.unique().numel() != index.numel():
            raise ValueError(
                f"CompactFrameStorage.set: slots {index.tolist()[:8]}...: a slot written twice "
                "in one write"
            )
        keys = self._resolve_keys(data)
        if self.initialized:
            self._hand_over(index)
        compact = data.exclude(*keys, *[("next", *k) for k in keys])
        contiguous = index[1:] == (index[:-1] + 1) % self.max_size
        for key in keys:
            self._encode(key, data.get(key), data.get(("next", *key)), contiguous, compact)
        super().set(index, compact, set_cursor=set_cursor)
        self._written[index] = True

    def _resolve_keys(self, data: TensorDictBase) -> list[Any]:
        if self.frame_keys is None:
            if self._asked_keys is not None:
                for key in self._asked_keys:
                    for full in (key, ("next", *_tuple(key))):
                        if unravel_key(full) not in data.keys(True, True):
                            raise ValueError(
                                f"keys={self._asked_keys!r}: the data has no {full!r}; its keys: "
                                f"{sorted(map(str, data.keys(True, True)))}"
                            )
                keys = [_tuple(k) for k in self._asked_keys]
            else:
                keys = [_tuple(k) for k in self._default_keys(data)]
            if self.stack_dim is not None:
                for key in keys:
                    shape = data.get(key).shape[1:]
                    if len(shape) < -self.stack_dim or shape[self.stack_dim] < 2:
                        raise ValueError(
                            f"stack_dim={self.stack_dim}: {key!r} has per-step shape "
                            f"{list(shape)}, no stack of >= 2 frames along that dim"
                        )
            self.frame_keys = keys
        return self.frame_keys

    def _default_keys(self, data: TensorDictBase) -> list[Any]:
        keys, listed = [], [_tuple(k) for k in data.keys(True, True)]
        present = set(listed)
        for key in listed:
            if key[0] in ("next", _INTERNAL) or ("next", *key) not in present:
                continue
            now, nxt = data.get(key), data.get(("next", *key))
            one = now[0] if now.shape[0] else now
            if (
                isinstance(now, torch.Tensor)
                and now.shape == nxt.shape
                and now.dtype == nxt.dtype
                and one.numel() * one.element_size() >= self.min_bytes
            ):
                keys.append(key)
        return keys

    def _encode(self, key, obs, nxt, contiguous, compact: TensorDictBase) -> None:
        n = obs.shape[0]
        fwd = torch.zeros(n, dtype=torch.bool)
        fwd[:-1] = contiguous & _same(nxt[:-1], obs[1:])
        final = torch.full((n,), -1, dtype=torch.long)
        aside = (~fwd).nonzero().flatten()
        final[aside] = self._pool(key, "final").put(nxt.index_select(0, aside))
        compact.set((_INTERNAL, *key, "final"), final)
        if self.stack_dim is None:
            compact.set((_INTERNAL, *key, "plane"), obs)
            return
        stacked = obs.movedim(self.stack_dim, 1)  # [n, frames, ...]
        back = torch.zeros(n, dtype=torch.bool)
        back[1:] = contiguous & _same(stacked[1:, :-1], stacked[:-1, 1:])
        head = torch.full((n,), -1, dtype=torch.long)
        aside = (~back).nonzero().flatten()
        head[aside] = self._pool(key, "head").put(stacked.index_select(0, aside)[:, :-1])
        compact.set((_INTERNAL, *key, "head"), head)
        compact.set((_INTERNAL, *key, "plane"), stacked[:, -1])

    def _hand_over(self, index: torch.Tensor) -> None:
        """Before ``index`` is overwritten: its neighbours stop leaning on it; its pool slots freed."""
        size = self.max_size
        over = torch.zeros(size, dtype=torch.bool)
        over[index] = True
        before = (index - 1) % size
        before = before[~over[before] & self._written[before]]
        after = (index + 1) % size
        after = after[~over[after] & self._written[after]]
        updates = []
        for key in self.frame_keys:
            final = self._internal(key, "final")
            lean = before[final[before] < 0]  # their next observation is the overwritten slot's
            updates.append((key, "final", lean, self._observations(key, (lean + 1) % size)))
            if self.stack_dim is not None:
                head = self._internal(key, "head")
                lean = after[head[after] < 0]  # their older planes are the overwritten slot's
                older = self._observations(key, lean, stacked=True)[:, :-1]
                updates.append((key, "head", lean, older))
        for key, kind, slots, values in updates:
            self._internal(key, kind)[slots] = self._pool(key, kind).put(values)
        was_written = index[self._written[index]]
        kinds = ("final", "head") if self.stack_dim is not None else ("final",)
        for key in self.frame_keys:
            for kind in kinds:
                self._pool(key, kind).free(self._internal(key, kind)[was_written])

    # -- reading -------------------------------------------------------------------------

    def get(self, index: Any) -> Any:
        if not self.initialized:
            raise RuntimeError("Cannot get elements out of a non-initialized storage.")
        stored = self._storage if self._is_full else self._storage[: self._len_along_dim0]
        td = stored.exclude(_INTERNAL)[index]  # the planes are gathered below, once
        slots = self._slots(index, len(self) if not self._is_full else self.max_size)
        flat = slots.reshape(-1)
        for key in self.frame_keys:
            final = self._internal(key, "final")[flat]
            aside = final >= 0  # else the next slot's observation
            after = torch.where(aside, flat, (flat + 1) % self.max_size)  # a written slot
            both = self._observations(key, torch.cat([flat, after]))
            obs, nxt = both[: flat.numel()], both[flat.numel() :]
            if aside.any():
                rows = aside.nonzero().flatten()
                kept = self._pool(key, "final").data.index_select(0, final[rows])
                nxt.index_copy_(0, rows, kept)
            td.set(key, obs.reshape(*slots.shape, *obs.shape[1:]))
            td.set(("next", *key), nxt.reshape(*slots.shape, *nxt.shape[1:]))
        return td.exclude(_INTERNAL)

    def _observations(self, key, slots: torch.Tensor, *, stacked: bool = False) -> torch.Tensor:
        """The observations of ``key`` at ``slots`` (stack dim moved to 1 if ``stacked``).

        With stacking, plane ``p`` of slot ``i`` (newest last, ``S`` planes) is the newest
        plane of slot ``i - (S - 1 - p)`` unless a slot on the way back holds its older
        planes aside: with ``k`` the steps back to the nearest such slot, planes
        ``p <= S - 2 - k`` come from that slot's kept planes, at ``p + k``.
        """
        plane = self._internal(key, "plane")
        if self.stack_dim is None:
            return plane.index_select(0, slots)
        head, pool, size = self._internal(key, "head"), self._pool(key, "head"), self.max_size
        frames = pool.data.shape[1] + 1
        back = torch.arange(frames - 1)  # steps back, 0 .. S-2
        before = (slots[:, None] - back) % size  # [m, S-1]
        holds = head[before] >= 0
        k = torch.where(holds.any(-1), holds.int().argmax(-1), frames - 1)  # [m]
        positions = torch.arange(frames)
        rows = (slots[:, None] - (frames - 1 - positions)) % size  # [m, S]
        out = plane.index_select(0, rows.reshape(-1))  # [m * S, ...]
        aside = positions[None, :] <= frames - 2 - k[:, None]
        if aside.any():
            which, at = aside.nonzero(as_tuple=True)
            kept = head[(slots - k) % size][which] * (frames - 1) + at + k[which]
            planes = pool.data.reshape(-1, *plane.shape[1:]).index_select(0, kept)
            out.index_copy_(0, which * frames + at, planes)
        out = out.reshape(slots.numel(), frames, *plane.shape[1:])
        return out if stacked else out.movedim(1, self.stack_dim)

    # -- bookkeeping ---------------------------------------------------------------------

    def _internal(self, key, kind: str) -> torch.Tensor:
        return self._storage.get((_INTERNAL, *key, kind))

    def _pool(self, key, kind: str) -> _Pool:
        return self._pools.setdefault(f"{'.'.join(key)}:{kind}", _Pool())

    def _slots(self, index: Any, length: int) -> torch.Tensor:
        """The slots ``index`` names in a storage of ``length`` (as ``storage[index]`` reads them)."""
        if isinstance(index, torch.Tensor) and index.dtype != torch.bool:
            index = index.long()
            return torch.where(index < 0, index + length, index)
        if isinstance(index, int):
            return torch.tensor(index + length if index < 0 else index)
        return torch.arange(length)[index]

    def pool_sizes(self) -> dict[str, dict[str, int]]:
        """Per observation key, how many values are kept aside (final observations, first stacks)."""
        sizes: dict[str, dict[str, int]] = {}
        for name, pool in self._pools.items():
            key, kind = name.rsplit(":", 1)
            sizes.setdefault(key, {})[kind] = int(pool.used.sum())
        return sizes

    def nbytes(self) -> int:
        """Bytes held: the slots (allocated for ``max_size``) and the side pools."""
        main = 0 if self._storage is None else self._storage.bytes()
        return int(main + sum(pool.nbytes() for pool in self._pools.values()))

    def _empty(self) -> None:
        super()._empty()
        self._pools, self._written = {}, torch.zeros(self.max_size, dtype=torch.bool)

    def _compact_state(self) -> dict[str, Any]:
        return {
            "frame_keys": self.frame_keys,
            "written": self._written.clone(),
            "pools": {name: pool.state() for name, pool in self._pools.items()},
        }

    def _load_compact_state(self, state: dict[str, Any]) -> None:
        self.frame_keys = state["frame_keys"]
        self._written = state["written"].clone()
        self._pools = {name: _Pool.from_state(s) for name, s in state["pools"].items()}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "compact": self._compact_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._load_compact_state(state_dict["compact"])

    def dumps(self, path: Any) -> None:
        super().dumps(path)
        torch.save(self._compact_state(), Path(path) / _STATE_FILE)

    def loads(self, path: Any) -> None:
        super().loads(path)
        self._load_compact_state(torch.load(Path(path) / _STATE_FILE, weights_only=False))


def _tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
