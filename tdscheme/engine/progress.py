"""The user-facing progress display of a training run.

On a terminal it is a tqdm bar (frames, frames per second and the latest values
such as the return); elsewhere (CI logs, files, notebooks' captured output) it
writes one plain line at most every ``every_s`` seconds and one at the end::

    frames 12000/100000 (12.0%) | 3400 fps | return 23.5

It writes to its stream directly rather than through :mod:`logging`: it is the
display, not a record.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

import torch


class Progress:
    """Shows the progress of a run in frames.

    Args:
        total_frames: The frames the run will collect (a positive int).
        enabled: Whether to draw a tqdm bar: ``True`` draws one, ``False`` writes plain
            lines, ``None`` draws one only when ``stream.isatty()``.
        every_s: The least number of seconds between two plain lines (``0`` writes one
            per :meth:`update`).
        stream: Where to write; ``None`` (the default) is ``sys.stderr`` at construction.
        initial_frames: The frames already collected (when resuming); frames per second
            count only the frames of this session.

    Raises:
        ValueError: If ``total_frames``, ``every_s`` or ``initial_frames`` is invalid.

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> with Progress(1000, stream=out, every_s=60) as progress:
        ...     progress.update(250, **{"return": 12.5})
        >>> out.getvalue().startswith("frames 250/1000 (25.0%) | ")
        True
        >>> out.getvalue().rstrip().endswith("fps | return 12.5")
        True
    """

    def __init__(
        self,
        total_frames: int,
        *,
        enabled: bool | None = None,
        every_s: float = 10.0,
        stream: TextIO | None = None,
        initial_frames: int = 0,
    ) -> None:
        if isinstance(total_frames, bool) or not isinstance(total_frames, int) or total_frames < 1:
            raise ValueError(f"total_frames must be a positive int, got {total_frames!r}")
        if isinstance(every_s, bool) or not isinstance(every_s, (int, float)) or not every_s >= 0:
            raise ValueError(f"every_s must be a non-negative number of seconds, got {every_s!r}")
        if (
            isinstance(initial_frames, bool)
            or not isinstance(initial_frames, int)
            or initial_frames < 0
        ):
            raise ValueError(f"initial_frames must be a non-negative int, got {initial_frames!r}")
        if enabled not in (None, True, False):
            raise ValueError(f"enabled must be True, False or None (auto), got {enabled!r}")
        self.total_frames = total_frames
        self.every_s = float(every_s)
        self.frames = initial_frames
        stream = sys.stderr if stream is None else stream
        self._stream = stream
        self._initial_frames = initial_frames
        self._postfix: dict[str, Any] = {}
        self._start = time.monotonic()
        self._last_line = self._start
        self._closed = False
        if enabled is None:
            enabled = _isatty(stream)
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_frames,
                initial=initial_frames,
                unit="frame",
                unit_scale=True,
                dynamic_ncols=True,
                file=stream,
            )

    @property
    def fps(self) -> float:
        """Frames per second collected since this display started."""
        elapsed = time.monotonic() - self._start
        return (self.frames - self._initial_frames) / elapsed if elapsed > 0 else 0.0

    def update(self, frames: int, **postfix: Any) -> None:
        """Adds ``frames`` new frames and sets the shown values.

        Args:
            frames: Frames collected since the last call (not the running total).
            **postfix: Values to show, e.g. ``**{"return": 23.5}``; each stays shown until
                it is set again. Floats and one-element tensors are shown with 4
                significant digits.

        Raises:
            ValueError: If ``frames`` is negative.
            RuntimeError: If the display is closed.
        """
        if self._closed:
            raise RuntimeError("Progress is closed")
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 0:
            raise ValueError(f"frames must be a non-negative int, got {frames!r}")
        self.frames += frames
        self._postfix.update({key: _format(value) for key, value in postfix.items()})
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(self._postfix, refresh=False)
            self._bar.update(frames)
            return
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            self._write_line()

    def line(self) -> str:
        """The plain line: ``frames 12000/100000 (12.0%) | 3400 fps | return 23.5``."""
        percent = 100.0 * self.frames / self.total_frames
        parts = [
            f"frames {self.frames}/{self.total_frames} ({percent:.1f}%)",
            f"{self.fps:.0f} fps",
        ]
        parts += [f"{key} {value}" for key, value in self._postfix.items()]
        return " | ".join(parts)

    def _write_line(self) -> None:
        self._stream.write(self.line() + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Closes the bar, or writes the final plain line; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        else:
            self._write_line()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "bar" if self._bar is not None else "lines"
        return f"Progress({self.frames}/{self.total_frames} frames, {mode})"


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        return False


def _format(value: Any) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)
