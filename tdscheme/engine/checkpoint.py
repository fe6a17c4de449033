"""Atomic, safely loadable checkpoints.

A checkpoint is one ``torch.save`` file holding a small envelope::

    {"format": "tdscheme.checkpoint", "version": 1, "step": <int>, "state": <state>}

where ``<state>`` is made only of tensors, ints, floats, strs, bools, ``None`` and
lists, tuples and dicts of them (see :func:`to_safe`), so that it loads with
``torch.load(..., weights_only=True)``: loading a checkpoint never runs code from
the file. Files are written to a temporary file in the same directory, flushed,
fsynced and moved into place with :func:`os.replace`, so a crash while saving
leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdscheme.engine.atomic import TMP_SUFFIX, atomic_write
from tdscheme.errors import CheckpointError

logger = logging.getLogger(__name__)

FORMAT = "tdscheme.checkpoint"
VERSION = 1

_NAME_RE = re.compile(r"^ckpt_(\d+)\.pt$")
_TMP_PREFIX = ".ckpt_"  # atomic_write names its temporary file ".<name>.<random>.tmp"


def to_safe(obj: Any) -> Any:
    """Converts ``obj`` into data that ``torch.load(weights_only=True)`` accepts.

    Tensors are detached (subclasses such as parameters become plain tensors);
    TensorDicts become nested dicts of tensors (their batch size is not kept: rebuilding
    them is the caller's business); numpy arrays become tensors and numpy scalars
    Python numbers, so numpy's RNG state (a tuple holding an array) and
    ``random.getstate()`` (a tuple of ints) pass through. Dicts (keys must be str or
    int), ``OrderedDict`` (its ``_metadata`` is kept, as ``nn.Module.state_dict``
    needs), lists and tuples are converted item by item.

    Args:
        obj: The object to convert.

    Returns:
        A converted copy of the containers; tensors and arrays share memory with ``obj``.

    Raises:
        TypeError: If ``obj`` holds anything else; the message names its place within
            the state, e.g. ``state['learner']['foo']``.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> safe = to_safe({"td": TensorDict(a=torch.zeros(2), batch_size=[2]), "n": 3})
        >>> safe["td"]["a"], safe["n"]
        (tensor([0., 0.]), 3)
        >>> to_safe({"f": len})
        Traceback (most recent call last):
        ...
        TypeError: state['f'] has type builtin_function_or_method, which a checkpoint ...
    """
    return _to_safe(obj, "state")


def _to_safe(obj: Any, path: str) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        tensor = obj.detach()
        return tensor if type(tensor) is torch.Tensor else tensor.as_subclass(torch.Tensor)
    if isinstance(obj, TensorDictBase):
        return _to_safe(obj.to_dict(), path)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(
                f"{path} is a numpy array of dtype object, which a checkpoint cannot hold"
            )
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Mapping):
        return _mapping_to_safe(obj, path)
    if isinstance(obj, (list, tuple)):
        items = [_to_safe(item, f"{path}[{i}]") for i, item in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    raise TypeError(
        f"{path} has type {type(obj).__name__}, which a checkpoint cannot hold; accepted: tensors, "
        "TensorDicts, numpy arrays, int, float, str, bool, None and lists, tuples or dicts of them"
    )


def _mapping_to_safe(obj: Mapping, path: str) -> dict:
    out: dict = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
    for key, value in obj.items():
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise TypeError(
                f"{path} has the key {key!r} of type {type(key).__name__}; checkpoint dict keys "
                "must be str or int"
            )
        out[key] = _to_safe(value, f"{path}[{key!r}]")
    metadata = getattr(obj, "_metadata", None)
    if isinstance(out, collections.OrderedDict) and metadata is not None:
        out._metadata = _to_safe(metadata, f"{path}._metadata")  # type: ignore[attr-defined]
    return out


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any], *, step: int = 0) -> Path:
    """Writes ``state`` to ``path`` atomically (:func:`~tdscheme.engine.atomic.atomic_write`).

    Args:
        path: The checkpoint file; its directory must exist.
        state: A dict of what to save; converted with :func:`to_safe` before anything
            is written.
        step: The training step stored in the envelope.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        TypeError: If ``state`` is not a dict or holds an object a checkpoint cannot hold.
        FileNotFoundError: If the directory of ``path`` does not exist.

    Example:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = save_checkpoint(Path(d) / "x.pt", {"w": torch.ones(2)})
        ...     load_checkpoint(p)["w"]
        tensor([1., 1.])
    """
    path = Path(path)
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    payload = {"format": FORMAT, "version": VERSION, "step": int(step), "state": to_safe(state)}
    if not path.parent.is_dir():
        raise FileNotFoundError(
            f"cannot save checkpoint {path}: directory {path.parent} does not exist"
        )
    with atomic_write(path, binary=True) as f:
        torch.save(payload, f)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Loads the state saved by :func:`save_checkpoint`, safely and onto the CPU.

    Args:
        path: The checkpoint file.

    Returns:
        The saved state dict (tensors on the CPU).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        CheckpointError: If the file is corrupt, truncated, unreadable, holds objects that
            ``weights_only`` loading refuses, or is not a tdscheme checkpoint of a known version.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = Path(d, "bad.pt").write_bytes(b"garbage")
        ...     load_checkpoint(Path(d, "bad.pt"))
        Traceback (most recent call last):
        ...
        tdscheme.errors.CheckpointError: checkpoint file ... is corrupt, ...
    """
    return _load_payload(Path(path))["state"]


def _load_payload(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {path} does not exist")
    damaged = f"checkpoint file {path} is corrupt, truncated or unreadable"
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a cut one has no index
        raise CheckpointError(f"{damaged}: it is not a complete torch.save archive")
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        if "weights only" in str(err).lower():
            raise CheckpointError(
                f"checkpoint file {path} holds objects that safe (weights_only) loading refuses, "
                f"so tdscheme's save_checkpoint did not write it: {_first_line(err)}"
            ) from err
        raise CheckpointError(f"{damaged}: {_first_line(err)}") from err
    except Exception as err:  # torch raises RuntimeError, EOFError, ... on damaged files
        raise CheckpointError(f"{damaged}: {type(err).__name__}: {_first_line(err)}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"checkpoint file {path} is not a tdscheme checkpoint: format is {found!r}, "
            f"expected {FORMAT!r}"
        )
    version = payload.get("version")
    if not isinstance(version, int) or not 1 <= version <= VERSION:
        raise CheckpointError(
            f"checkpoint file {path} has format version {version!r}; this tdscheme reads "
            f"versions 1 to {VERSION}"
        )
    return payload


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


class CheckpointManager:
    """Keeps the last few checkpoints of a run in one directory.

    Files are named ``ckpt_{step:012d}.pt``, so they sort by step. One manager writes
    to a directory at a time; leftover temporary files of a save that crashed are
    removed when the manager is created.

    Args:
        directory: Where the checkpoints live; created if missing.
        keep_last: How many of the newest checkpoints to keep (``None`` keeps all).

    Raises:
        ValueError: If ``keep_last`` is not a positive int or ``None``.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     manager = CheckpointManager(d, keep_last=2)
        ...     for step in (10, 20, 30):
        ...         _ = manager.save({"step": step, "w": torch.zeros(1)}, step)
        ...     [p.name for p in manager.list()], manager.load()["step"]
        (['ckpt_000000000020.pt', 'ckpt_000000000030.pt'], 30)
    """

    def __init__(self, directory: str | os.PathLike, *, keep_last: int | None = 3) -> None:
        if keep_last is not None and (
            not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1
        ):
            raise ValueError(f"keep_last must be a positive int or None, got {keep_last!r}")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f"{_TMP_PREFIX}*{TMP_SUFFIX}"):
            logger.warning("removing %s, left by a checkpoint save that did not finish", stale)
            stale.unlink(missing_ok=True)

    def save(self, state: Mapping[str, Any], step: int) -> Path:
        """Saves ``state`` as the checkpoint of ``step``; deletes the oldest beyond ``keep_last``.

        Args:
            state: A dict of what to save (see :func:`to_safe`).
            step: A non-negative int (frames or updates so far); a checkpoint of the same
                step is replaced.

        Returns:
            The path of the new checkpoint.

        Raises:
            ValueError: If ``step`` is not a non-negative int.
            TypeError: If ``state`` holds an object a checkpoint cannot hold.
        """
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        path = save_checkpoint(self.directory / f"ckpt_{step:012d}.pt", state, step=step)
        if self.keep_last is not None:
            for old in self.list()[: -self.keep_last]:
                old.unlink(missing_ok=True)
                logger.debug("deleted old checkpoint %s", old)
        return path

    def latest(self) -> Path | None:
        """The checkpoint of the highest step, or ``None`` if there is none."""
        paths = self.list()
        return paths[-1] if paths else None

    def load(self, path: str | os.PathLike | None = None) -> dict[str, Any]:
        """Loads a checkpoint: ``path``, or by default the newest readable one.

        Without ``path``, a newest checkpoint that is damaged is skipped with a warning
        and the one before it is loaded.

        Args:
            path: A checkpoint file, or ``None`` for the newest in :attr:`directory`.

        Returns:
            The saved state dict.

        Raises:
            FileNotFoundError: If ``path`` (or, by default, any checkpoint) does not exist.
            CheckpointError: If ``path`` (or, by default, every checkpoint) is damaged.
        """
        if path is not None:
            return load_checkpoint(path)
        return self.load_newest()[1]

    def load_newest(self) -> tuple[Path, dict[str, Any]]:
        """The newest readable checkpoint and its state; damaged newer ones are skipped with a warning.

        Returns:
            ``(path, state)``.

        Raises:
            FileNotFoundError: there is no checkpoint.
            CheckpointError: every checkpoint is damaged (each is named).
        """
        paths = self.list()
        if not paths:
            raise FileNotFoundError(f"no checkpoint (ckpt_*.pt) in {self.directory}")
        errors = []
        for candidate in reversed(paths):
            try:
                return candidate, load_checkpoint(candidate)
            except CheckpointError as err:
                logger.warning("skipping damaged checkpoint: %s", err)
                errors.append(str(err))
        raise CheckpointError(
            f"every checkpoint in {self.directory} is damaged: " + "; ".join(errors)
        )

    def list(self) -> list[Path]:
        """The checkpoints in :attr:`directory`, oldest (lowest step) first."""
        found = []
        for path in self.directory.iterdir():
            match = _NAME_RE.match(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), path))
        return [path for _, path in sorted(found)]

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, keep_last={self.keep_last})"
