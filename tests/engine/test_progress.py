"""Progress: a tqdm bar on a terminal, plain periodic lines elsewhere."""

from __future__ import annotations

import io
import re

import pytest
import torch

from tdscheme.engine.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


LINE = re.compile(r"^frames (\d+)/(\d+) \((\d+\.\d)%\) \| \d+ fps(?: \| .*)?$")


def test_plain_lines_have_frames_percent_fps_and_postfix():
    out = io.StringIO()
    with Progress(100_000, stream=out, every_s=0) as progress:
        progress.update(12_000, **{"return": 23.5})
        progress.update(1_000, loss=torch.tensor(0.123456))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # one per update (every_s=0) and the final one
    assert all(LINE.match(line) for line in lines), lines
    assert lines[0].startswith("frames 12000/100000 (12.0%) | ")
    assert lines[0].endswith(" fps | return 23.5")
    assert lines[1].endswith(" fps | return 23.5 | loss 0.1235")  # the return stays shown
    assert lines[2].startswith("frames 13000/100000 (13.0%)")


def test_lines_are_rate_limited_with_one_final_line():
    out = io.StringIO()
    progress = Progress(1000, stream=out, every_s=3600)
    for _ in range(10):
        progress.update(100, **{"return": float("nan")})
    assert out.getvalue() == ""
    progress.close()
    progress.close()  # idempotent: no second final line
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("frames 1000/1000 (100.0%)")
    assert lines[0].endswith("return nan")
    with pytest.raises(RuntimeError, match="closed"):
        progress.update(1)


def test_a_terminal_gets_a_tqdm_bar():
    out = _Terminal()
    with Progress(1000, stream=out) as progress:
        progress.update(500, **{"return": 12.5})
        assert "bar" in repr(progress)
    text = out.getvalue()
    assert "return=12.5" in text and "frame" in text and "1000/1000" not in text
    assert "500/1.00k" in text or "500/1000" in text


def test_enabled_overrides_the_terminal_check():
    terminal = _Terminal()
    with Progress(10, stream=terminal, enabled=False, every_s=0) as progress:
        progress.update(5)
    assert terminal.getvalue().startswith("frames 5/10 (50.0%)")
    plain = io.StringIO()
    with Progress(10, stream=plain, enabled=True) as progress:
        progress.update(5)
    assert "frame" in plain.getvalue() and not plain.getvalue().startswith("frames 5/10")


def test_initial_frames_when_resuming():
    out = io.StringIO()
    with Progress(1000, stream=out, every_s=3600, initial_frames=500) as progress:
        progress.update(100)
        assert progress.frames == 600
    assert out.getvalue().startswith("frames 600/1000 (60.0%)")


def test_default_stream_is_stderr_at_construction(capsys):
    with Progress(10, every_s=0) as progress:
        progress.update(5)
    assert "frames 5/10 (50.0%)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"total_frames": 0}, "total_frames must be a positive int, got 0"),
        ({"total_frames": 10.0}, "total_frames must be a positive int, got 10.0"),
        ({"total_frames": 10, "every_s": -1}, "every_s must be a non-negative number"),
        ({"total_frames": 10, "initial_frames": -3}, "initial_frames must be a non-negative int"),
        ({"total_frames": 10, "enabled": "yes"}, "enabled must be True, False or None"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        Progress(stream=io.StringIO(), **kwargs)


def test_negative_update_is_refused():
    with Progress(10, stream=io.StringIO()) as progress:
        with pytest.raises(ValueError, match="frames must be a non-negative int, got -1"):
            progress.update(-1)
