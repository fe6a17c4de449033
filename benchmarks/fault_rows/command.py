"""Fault rows of issue 12, section 3: the command (a user's mistakes on its line, signals).

Each row is a function returning the dict ``benchmarks/faults.py`` records; it runs
``tdscheme train`` or ``tdscheme eval`` in a child process with its own
``RAY_TMPDIR``: a mistyped option, a bad ``--resume`` or a damaged checkpoint must be
one line naming the option or the file (no traceback, no Ray started where none is
needed); SIGTERM or SIGINT must stop the run cleanly with nothing of its Ray left.
Heavy imports stay inside the functions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import row
from harness import fresh_ray_env, processes_left, wait_until

from fault_rows._parts import TDSCHEME, damage, outputs_on_exit

TIMEOUT_S = 300.0
SMALL_RUN = [
    "--num-collectors", "1", "--num-envs", "4", "--frames-per-batch", "256",
    "--minibatch-size", "128", "--num-epochs", "1", "--eval-every-frames", "0",
    "--checkpoint-every-frames", "0", "--collector-resources", '{"num_cpus": 0.5}',
    "--progress", "false",
]  # fmt: skip


# -- mistakes on the command line ---------------------------------------------------------


def _command(fault: str, args: list[str], *, expect: tuple[str, ...], code: int = 2,
             bound_s: float = 2.0, cwd: str | None = None) -> dict[str, Any]:  # fmt: skip
    ray_tmp = tempfile.mkdtemp(prefix="r", dir=os.environ.get("TMPDIR"))
    env = fresh_ray_env(ray_tmp)
    start = time.perf_counter()
    result = subprocess.run([*TDSCHEME, *args], capture_output=True, text=True, timeout=240,
                            env=env, cwd=cwd)  # fmt: skip
    seconds = time.perf_counter() - start
    err = result.stderr
    errors = [line for line in err.splitlines() if "error:" in line]
    missing = [e for e in expect if e not in err]
    ray_started = bool(os.listdir(ray_tmp))
    ok = result.returncode == code and not missing and "Traceback" not in err and len(errors) <= 1
    detail = (errors[0] if errors else err.strip().splitlines()[-1] if err.strip() else "")[:300]
    detail += f" (exit {result.returncode}; Ray started: {ray_started}" + (
        f"; missing {missing})" if missing else ")"
    )
    return row(fault, "clean error" if ok else "wrong result", seconds, bound_s, detail=detail)


def cli_env_id() -> dict[str, Any]:
    return _command("tdscheme train --env-id Cartpole-v1 (typo)", ["train", "--env-id", "Cartpole-v1"],
                    expect=("argument --env-id", "did you mean 'CartPole-v1'"))  # fmt: skip


def cli_ray_key() -> dict[str, Any]:
    return _command("tdscheme train --ray-init-config with an unknown key",
                    ["train", "--ray-init-config", '{"num_cpu": 2}'],
                    expect=("argument --ray-init-config", "'num_cpu'"))  # fmt: skip


def cli_bad_value() -> dict[str, Any]:
    return _command("tdscheme train --num-collectors 0", ["train", "--num-collectors", "0"],
                    expect=("argument --num-collectors: num_collectors=0 is invalid",), bound_s=30.0)  # fmt: skip


def cli_bad_resources() -> dict[str, Any]:
    return _command("tdscheme train --collector-resources '{\"num_cpu\": 1}'",
                    ["train", "--collector-resources", '{"num_cpu": 1}'],
                    expect=("argument --collector-resources", "num_cpu"), bound_s=30.0)  # fmt: skip


def _saved_run(run_dir: Path) -> Path:
    from tdscheme.engine import CheckpointManager
    from tdscheme.presets import get_preset

    preset = get_preset("ppo-cartpole").override({"num_collectors": 1, "eval_num_envs": 1})
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(preset.to_dict()))
    learner = preset.learner_factory()(**preset.policy_factory()())
    manager = CheckpointManager(run_dir / "checkpoints")
    for frames in (512, 1024):
        manager.save({"scheme": {"learner": learner.state_dict(), "frames": frames},
                      "config": preset.to_dict()}, frames)  # fmt: skip
    return run_dir


def cli_resume_changed() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        return _command("tdscheme train --resume with changed --hidden-sizes and --env-id",
                        ["train", "--resume", str(run_dir), "--hidden-sizes", "32,32", "--env-id",
                         "Acrobot-v1"],
                        expect=("argument --hidden-sizes: hidden_sizes=(32, 32) differs",
                                "argument --env-id: env_id='Acrobot-v1' differs"), bound_s=30.0)  # fmt: skip


def cli_resume_collectors() -> dict[str, Any]:
    from tdscheme.cli.parser import build_parser, train_preset

    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        args = build_parser().parse_args(
            ["train", "--resume", str(run_dir), "--num-collectors", "3"]
        )
        start = time.perf_counter()
        preset = train_preset(args)
        ok = preset.scheme.num_collectors == 1
        return row("tdscheme train --resume with a changed --num-collectors",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 2.0,
                   detail="the run's num_collectors=1 adopted, with a note")  # fmt: skip


def cli_resume_not_a_run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        return _command("tdscheme train --resume of a directory that is not a run",
                        ["train", "--resume", d], expect=("has no config.json",), bound_s=30.0)  # fmt: skip


def cli_eval_fallback() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        newest = run_dir / "checkpoints" / "ckpt_000000001024.pt"
        damage(newest, "truncated")
        start = time.perf_counter()
        result = subprocess.run([*TDSCHEME, "eval", str(run_dir), "--episodes", "1"],
                                capture_output=True, text=True, timeout=240)  # fmt: skip
        ok = (result.returncode == 0 and "at 512 frames" in result.stdout
              and str(newest) in result.stderr and "Traceback" not in result.stderr)  # fmt: skip
        warning = next((line for line in result.stderr.splitlines() if "skipping" in line), "")
        return row("tdscheme eval RUN_DIR with a truncated newest checkpoint",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 60.0,
                   detail=f"evaluated the previous one; {warning.strip()[:200]}")  # fmt: skip


def cli_eval_damaged_file() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        newest = run_dir / "checkpoints" / "ckpt_000000001024.pt"
        damage(newest, "garbage")
        return _command("tdscheme eval of a damaged checkpoint file", ["eval", str(newest)],
                        expect=(str(newest), "corrupt"), code=1, bound_s=30.0)  # fmt: skip


# -- signals --------------------------------------------------------------------------


def _signal_row(fault: str, sig: int, *, when: str, twice: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    ray_tmp = work / "ray"
    ray_tmp.mkdir()
    env = fresh_ray_env(ray_tmp)
    run_dir = work / "run"
    proc = subprocess.Popen(
        [*TDSCHEME, "train", "--run-dir", str(run_dir), "--total-frames", "100000000", *SMALL_RUN],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work,
    )  # fmt: skip
    metrics = run_dir / "metrics.csv"
    if when == "training":  # a few lines of metrics written

        def ready() -> bool:
            return metrics.is_file() and len(metrics.read_text().splitlines()) > 2

        wait_until(lambda: proc.poll() is not None or ready(), 240.0, poll_s=0.25)
    else:  # while Ray starts: its session directory appears
        wait_until(lambda: proc.poll() is not None or any(ray_tmp.rglob("session_*")), 240.0)
    start = time.perf_counter()
    proc.send_signal(sig)
    if twice:
        time.sleep(0.5)
        proc.send_signal(sig)
    outputs = outputs_on_exit(proc, 120.0)
    if outputs is None:
        return row(fault, "hang", time.perf_counter() - start, 60.0, detail="no exit within 120 s")
    output, _ = outputs
    seconds = time.perf_counter() - start
    left = processes_left(str(ray_tmp))
    expected = 128 + sig
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt_*.pt")) if run_dir.exists() else []
    lines = [line for line in output.splitlines() if line.startswith("tdscheme")]
    stop_line = next((line for line in lines if signal.Signals(sig).name in line), "")
    ok = proc.returncode == expected and not left and "Traceback" not in output and stop_line
    if when == "training" and not twice:
        ok = ok and bool(checkpoints) and "stopped cleanly" in stop_line
    detail = (f"exit {proc.returncode} (expected {expected}); Ray processes left: {len(left)}; "
              f"checkpoints: {[c.name for c in checkpoints]}; line: {stop_line[:160]}")  # fmt: skip
    return row(fault, "clean error" if ok else "wrong result", seconds, 60.0, detail=detail)


def sigterm_training() -> dict[str, Any]:
    return _signal_row(
        "SIGTERM while training (a scheduler's preemption)", signal.SIGTERM, when="training"
    )


def sigint_training() -> dict[str, Any]:
    return _signal_row("Ctrl-C (SIGINT) while training", signal.SIGINT, when="training")


def sigint_twice() -> dict[str, Any]:
    return _signal_row(
        "Ctrl-C twice while training (forced)", signal.SIGINT, when="training", twice=True
    )


def sigterm_ray_start() -> dict[str, Any]:
    return _signal_row("SIGTERM while Ray starts", signal.SIGTERM, when="ray")


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("cli: --env-id typo", cli_env_id),
    ("cli: --ray-init-config unknown key", cli_ray_key),
    ("cli: --num-collectors 0", cli_bad_value),
    ("cli: --collector-resources unknown key", cli_bad_resources),
    ("cli: --resume changed shapes", cli_resume_changed),
    ("cli: --resume changed collectors", cli_resume_collectors),
    ("cli: --resume not a run", cli_resume_not_a_run),
    ("cli: eval falls back", cli_eval_fallback),
    ("cli: eval damaged file", cli_eval_damaged_file),
    ("signal: SIGTERM while training", sigterm_training),
    ("signal: SIGINT while training", sigint_training),
    ("signal: SIGINT twice", sigint_twice),
    ("signal: SIGTERM while Ray starts", sigterm_ray_start),
]  # fmt: skip
