"""SIGTERM and Ctrl-C on a real ``tdscheme train``: a clean stop, 143 / 130, a final checkpoint,
one line saying so, and none of the run's Ray processes left. Then ``--resume`` continues from it.

Each run is a subprocess with its own ``RAY_TMPDIR``, so only that run's Ray processes are looked at.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# slow: signals sent to the command running as a subprocess
pytestmark = pytest.mark.slow

SMALL_RUN = [
    "--num-collectors", "1", "--num-envs", "4", "--frames-per-batch", "256",
    "--minibatch-size", "128", "--num-epochs", "1", "--eval-every-frames", "0",
    "--checkpoint-every-frames", "0", "--collector-resources", '{"num_cpus": 0.5}',
]  # fmt: skip
STOP_BOUND_S = 120.0  # generous: the machine is shared; the stop takes a step plus the shutdown


def ray_processes(ray_tmpdir: Path) -> list[str]:
    """The live processes (``"pid: command"``) whose command line names ``ray_tmpdir``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(ray_tmpdir) in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


@pytest.fixture
def short_tmp():
    """A short temporary directory (Ray's socket paths must stay under ~107 characters)."""
    path = Path(tempfile.mkdtemp(prefix="tds-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def train(tmp: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, RAY_TMPDIR=str(tmp / "ray"), TMPDIR=str(tmp))
    env.pop("RAY_ADDRESS", None)
    (tmp / "ray").mkdir(exist_ok=True)
    command = [sys.executable, "-m", "tdscheme.cli", "train", *args]
    return subprocess.Popen(
        command, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_frames(
    metrics: Path, frames: int, proc: subprocess.Popen, timeout_s: float = 240
) -> None:
    """Waits until the run has logged a step past ``frames`` (it is training, its handlers are in)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metrics.is_file():
            rows = [line.split(",") for line in metrics.read_text().splitlines()[1:]]
            if any(row[1] == "frames" and int(row[0]) > frames for row in rows if len(row) == 3):
                return
        if proc.poll() is not None:
            raise AssertionError(f"the run exited early: {proc.stdout.read()}")
        time.sleep(0.25)
    proc.kill()
    raise AssertionError(f"no step past {frames} frames in {metrics} within {timeout_s} s")


def stop(proc: subprocess.Popen, sig: int, tmp: Path) -> tuple[int, str, float]:
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        output, _ = proc.communicate(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"no stop within {STOP_BOUND_S} s: {output[-3000:]}") from None
    deadline = time.monotonic() + 10
    while (left := ray_processes(tmp / "ray")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes of the run left: {left}"
    return proc.returncode, output, time.monotonic() - sent


@pytest.mark.timeout(400)
def test_sigterm_then_ctrl_c_on_resume_stop_cleanly_with_checkpoints(short_tmp):
    tmp_path = short_tmp
    run_dir = tmp_path / "run"
    proc = train(tmp_path, "--run-dir", str(run_dir), "--total-frames", "100000000", *SMALL_RUN)
    wait_for_frames(run_dir / "metrics.csv", 256, proc)
    code, output, _ = stop(proc, signal.SIGTERM, tmp_path)
    assert code == 143, output[-3000:]
    lines = [line for line in output.splitlines() if "stopped cleanly" in line]
    assert len(lines) == 1 and "SIGTERM" in lines[0], output[-3000:]
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert checkpoints and str(checkpoints[-1]) in lines[0]
    assert "Traceback" not in output
    frames = int(checkpoints[-1].stem.split("_")[1])

    proc = train(tmp_path, "--resume", str(run_dir))  # continues from the final checkpoint
    wait_for_frames(run_dir / "metrics.csv", frames, proc)
    code, output, _ = stop(proc, signal.SIGINT, tmp_path)
    assert code == 130, output[-3000:]
    assert "SIGINT: stopped cleanly" in output and "Traceback" not in output
    newest = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1]
    assert int(newest.stem.split("_")[1]) > frames
