"""The replay buffer beside a checkpoint: torchrl's ``dumps`` / ``loads`` into ``replay_<frames>/``.

With ``SchemeConfig.checkpoint_replay_buffer=True`` each checkpoint file
``ckpt_<frames>.pt`` gets a directory ``replay_<frames>/`` (torchrl's own format:
storage, sampler and writer state), written first to a temporary directory and
renamed into place, so a crash leaves either no buffer or a whole one; the
checkpoint names it, and directories of deleted checkpoints are deleted with them.

Example:
    >>> buffer_dir_name(1024)
    'replay_000000001024'
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = ["buffer_dir_name", "load_replay_buffer", "prune_replay_buffers", "save_replay_buffer"]

logger = logging.getLogger(__name__)

_DIR_RE = re.compile(r"^replay_(\d+)$")
_CKPT_RE = re.compile(r"^ckpt_(\d+)\.pt$")


def buffer_dir_name(frames: int) -> str:
    """The directory name of the buffer saved with the checkpoint of ``frames``."""
    return f"replay_{frames:012d}"


def save_replay_buffer(scheme: Any, directory: Path, frames: int) -> str | None:
    """Dumps the scheme's replay buffer beside the checkpoint of ``frames``, if asked.

    Args:
        scheme: the running :class:`~tdscheme.Scheme`.
        directory: the checkpoint directory.
        frames: the checkpoint's step.

    Returns:
        The directory's name (kept in the checkpoint), or ``None`` when the scheme
        has no buffer or ``checkpoint_replay_buffer`` is off.
    """
    if getattr(scheme, "replay_buffer", None) is None or not scheme.config.checkpoint_replay_buffer:
        return None
    name = buffer_dir_name(frames)
    final, tmp = directory / name, directory / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    scheme.dump_replay_buffer(str(tmp))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return name


def load_replay_buffer(scheme: Any, directory: Path, name: str | None) -> None:
    """Loads the buffer a checkpoint names into the scheme's replay buffer.

    Raises:
        FileNotFoundError: the checkpoint names a buffer directory that is missing.
    """
    if name is None:
        if getattr(scheme, "replay_buffer", None) is not None and (
            scheme.config.checkpoint_replay_buffer
        ):
            logger.warning(
                "the checkpoint holds no replay buffer (it was saved with "
                "checkpoint_replay_buffer=False): the resumed run starts with an empty buffer"
            )
        return
    path = directory / name
    if not path.is_dir():
        raise FileNotFoundError(f"the checkpoint's replay buffer {path} is missing")
    scheme.load_replay_buffer(str(path))


def prune_replay_buffers(directory: Path) -> None:
    """Deletes buffer directories whose checkpoint file is gone (and stale temporary ones)."""
    if not directory.is_dir():
        return
    kept = {int(m.group(1)) for p in directory.iterdir() if (m := _CKPT_RE.match(p.name))}
    for path in directory.iterdir():
        match = _DIR_RE.match(path.name)
        stale_tmp = path.name.startswith(".replay_") and path.name.endswith(".tmp")
        if (match and int(match.group(1)) not in kept) or stale_tmp:
            shutil.rmtree(path, ignore_errors=True)
