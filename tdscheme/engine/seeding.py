"""Seeds and random-number-generator states for reproducible, resumable runs.

:func:`seed_everything` seeds Python's :mod:`random`, numpy's global generator and
torch (CPU and CUDA); :func:`worker_seeds` derives distinct seeds for remote workers
from one run seed; :func:`rng_state` and :func:`set_rng_state` capture and restore
all of these generators in a form that a checkpoint holds and loads safely.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

MAX_SEED = 2**32 - 1
_STATE_KEYS = ("python", "numpy", "torch", "cuda")


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"seed must be an int in [0, {MAX_SEED}], got {type(seed).__name__}: {seed!r}"
        )
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an int in [0, {MAX_SEED}], got {seed!r}")
    return int(seed)


def seed_everything(seed: int) -> None:
    """Seeds Python's ``random``, numpy's global generator and torch (all devices).

    Args:
        seed: An int in ``[0, 2**32 - 1]``.

    Raises:
        TypeError: If ``seed`` is not an int.
        ValueError: If ``seed`` is out of range.

    Example:
        >>> seed_everything(0); a = torch.rand(1)
        >>> seed_everything(0); bool(torch.equal(a, torch.rand(1)))
        True
    """
    seed = _check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def worker_seeds(seed: int, n: int) -> list[int]:
    """Derives ``n`` distinct, reproducible 31-bit seeds from ``seed``.

    Uses :meth:`numpy.random.SeedSequence.spawn`, so the seeds of different workers
    give statistically independent streams, and the first ``k`` seeds do not depend on
    ``n``.

    Args:
        seed: The run seed, an int in ``[0, 2**32 - 1]``.
        n: How many seeds (a non-negative int).

    Returns:
        ``n`` distinct ints in ``[0, 2**31 - 1]``.

    Raises:
        TypeError: If ``seed`` or ``n`` is not an int.
        ValueError: If ``seed`` or ``n`` is out of range.

    Example:
        >>> seeds = worker_seeds(7, 4)
        >>> len(set(seeds)), seeds == worker_seeds(7, 4), seeds[:2] == worker_seeds(7, 2)
        (4, True, True)
    """
    seed = _check_seed(seed)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be a non-negative int, got {type(n).__name__}: {n!r}")
    if n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    seeds: list[int] = []
    seen: set[int] = set()
    for child in np.random.SeedSequence(seed).spawn(int(n)):
        words = 1
        while True:  # a 31-bit collision is rare; then take the child's next word
            candidate = int(child.generate_state(words, dtype=np.uint32)[-1]) & 0x7FFFFFFF
            if candidate not in seen:
                break
            words += 1
        seen.add(candidate)
        seeds.append(candidate)
    return seeds


def rng_state() -> dict[str, Any]:
    """Captures the states of Python's ``random``, numpy's global generator and torch.

    Returns:
        A dict with keys ``"python"``, ``"numpy"``, ``"torch"`` and ``"cuda"`` (a list,
        empty when CUDA is not initialized), made only of tensors, ints, floats, strs
        and ``None``: a checkpoint holds it as is.

    Example:
        >>> state = rng_state(); a = (random.random(), np.random.rand(), torch.rand(1).item())
        >>> set_rng_state(state); a == (random.random(), np.random.rand(), torch.rand(1).item())
        True
    """
    version, internal, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [s.clone() for s in torch.cuda.get_rng_state_all()]
    return {
        "python": {
            "version": int(version),
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "bit_generator": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
        "cuda": cuda,
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restores the generator states captured by :func:`rng_state`.

    CUDA states are restored when CUDA is available and the number of devices
    matches; otherwise they are skipped with a warning.

    Args:
        state: A dict from :func:`rng_state` (possibly through a checkpoint).

    Raises:
        ValueError: If ``state`` lacks one of its keys.
    """
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        raise ValueError(
            f"state is missing the keys {missing}; expected a dict from rng_state() with keys "
            f"{list(_STATE_KEYS)}"
        )
    py = state["python"]
    random.setstate(
        (int(py["version"]), tuple(int(x) for x in py["state"].tolist()), py["gauss_next"])
    )
    npy = state["numpy"]
    np.random.set_state(
        (
            npy["bit_generator"],
            np.asarray(npy["keys"].numpy(), dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached_gaussian"]),
        )
    )
    torch.set_rng_state(torch.as_tensor(state["torch"], dtype=torch.uint8))
    cuda = list(state["cuda"])
    if cuda:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            logger.warning(
                "not restoring %d CUDA RNG state(s): this process has %d CUDA device(s)",
                len(cuda),
                torch.cuda.device_count() if torch.cuda.is_available() else 0,
            )
