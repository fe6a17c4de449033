"""The command's messages for a user's mistakes: one line naming the option, no traceback, before Ray.

The early checks run in real subprocesses (each is a fresh ``tdscheme train``) with a
``RAY_TMPDIR`` of their own: no Ray session may appear in it. ``--resume`` and ``eval``
run in-process (they need torch, which the test process has already imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tdscheme.cli.main import main
from tdscheme.engine import CheckpointManager
from tdscheme.presets import get_preset

TDSCHEME = [sys.executable, "-m", "tdscheme.cli"]


USAGE_ERRORS = {
    "env-id typo": (["train", "--env-id", "Cartpole-v1"],
                    "argument --env-id: env_id='Cartpole-v1' is invalid", "did you mean 'CartPole-v1'"),
    "no collectors": (["train", "ppo-cartpole", "--num-collectors", "0"],
                      "argument --num-collectors: num_collectors=0", "accepted"),
    "unknown preset": (["train", "ppo-cartpol"], "argument PRESET: invalid choice", "ppo-cartpole"),
    "negative lr": (["train", "--lr", "-1"], "argument --lr: lr=-1.0", "accepted"),
    "unknown Ray option": (["train", "--ray-init-config", '{"num_cpu": 2}'],
                           "argument --ray-init-config: ray_init_config['num_cpu']=2 is invalid",
                           "num_cpus"),
    "resume of no run": (["train", "--resume", "nowhere"], "argument --resume: nowhere has no",
                         "not a tdscheme run"),
}  # fmt: skip


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(USAGE_ERRORS))
def test_usage_errors_are_one_line_before_ray_starts(tmp_path, case):
    argv, *expected = USAGE_ERRORS[case]
    ray_tmp = tmp_path / "r"
    ray_tmp.mkdir()
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [*TDSCHEME, *argv], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    # one usage line above it, not every preset's options (55 lines before)
    assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
    assert all(text in errors[0] for text in expected), errors[0]
    assert list(ray_tmp.iterdir()) == [], "Ray was started before the usage error"


def heavy_modules_after(code: str, modules: tuple[str, ...]) -> str:
    """Runs ``code`` in a fresh Python; returns its ``heavy: [...]`` line (``modules`` imported)."""
    code += f"heavy = sorted(m for m in {modules!r} if m in sys.modules)\nprint('heavy:', heavy)\n"
    result = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout + result.stderr


def test_parsing_and_checking_every_preset_imports_no_torch():
    """What runs before Ray starts stays light: no torch, tensordict or torchrl."""
    code = (
        "from tdscheme.cli.parser import build_parser, train_preset\n"
        "from tdscheme.presets import PRESETS\n"
        "for name in sorted(PRESETS):\n"
        "    train_preset(build_parser().parse_args(['train', name, '--run-dir', 'x']))\n"
    )
    out = heavy_modules_after(code, ("torch", "tensordict", "torchrl"))
    assert "heavy: []" in out, out


def test_the_entry_imports_nothing_heavy_before_its_signal_handlers():
    """`tdscheme` installs its SIGINT / SIGTERM handlers first: no Ray, torch or torchrl before.

    A Ctrl-C in the first moments of the command meets tdscheme's handler (a stop
    request), not a traceback from inside ``import ray`` (~0.25 s of it).
    """
    out = heavy_modules_after(
        "import tdscheme.cli.main\n", ("ray", "torch", "tensordict", "torchrl")
    )
    assert "heavy: []" in out, out


def saved_run(run_dir: Path, **overrides) -> Path:
    """A run directory as `tdscheme train` leaves it: config.json and two checkpoints."""
    preset = get_preset("ppo-cartpole").override({"num_collectors": 1, **overrides})
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(preset.to_dict()))
    learner = preset.learner_factory()(**preset.policy_factory()())
    manager = CheckpointManager(run_dir / "checkpoints")
    for frames in (512, 1024):
        state = {"scheme": {"learner": learner.state_dict(), "frames": frames}}
        manager.save({**state, "config": preset.to_dict()}, frames)
    return run_dir


def test_resume_with_changed_shapes_names_each_option(tmp_path, capsys):
    run_dir = saved_run(tmp_path / "run")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--resume", str(run_dir), "--hidden-sizes", "32,32",
              "--env-id", "Acrobot-v1", "--total-frames", "4096"])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --hidden-sizes: hidden_sizes=(32, 32) differs from the run" in err
    assert "argument --env-id: env_id='Acrobot-v1' differs from the run" in err
    error = next(line for line in err.splitlines() if "error:" in line)
    assert "Traceback" not in err and "--total-frames" not in error


def test_eval_falls_back_past_a_damaged_newest_checkpoint(tmp_path, capsys, caplog):
    run_dir = saved_run(tmp_path / "run", eval_num_envs=1)
    newest = run_dir / "checkpoints" / "ckpt_000000001024.pt"
    newest.write_bytes(newest.read_bytes()[:-64])
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "at 512 frames" in out and "ckpt_000000000512.pt" in out
    assert any(str(newest) in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert torch.is_tensor(torch.zeros(1))  # torch stays importable after main's handlers


def test_resume_adopts_the_runs_number_of_collectors(tmp_path, capsys):
    from tdscheme.cli.parser import build_parser, train_preset

    run_dir = saved_run(tmp_path / "run")
    args = build_parser().parse_args(["train", "--resume", str(run_dir), "--num-collectors", "3"])
    preset = train_preset(args)
    assert preset.scheme.num_collectors == 1 and preset.trainer.resume
    assert "--num-collectors 3 ignored: the run in" in capsys.readouterr().err
