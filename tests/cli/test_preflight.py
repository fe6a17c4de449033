"""Every optional package is checked before a run directory is made or Ray starts, naming its extra.

A package is hidden the way a missing one looks to Python (``sys.modules[name] = None``:
``import`` raises and ``importlib.util.find_spec`` finds nothing); the command must stop
with one usage line naming the option and ``pip install -c constraints.txt -e '.[<extra>]'``, a new run
and a resumed one (``--resume``) alike.
"""

from __future__ import annotations

import json
import sys

import pytest

from tdscheme.cli.main import main
from tdscheme.engine import CheckpointManager, Trainer, TrainerConfig
from tdscheme.presets import PRESETS, get_preset


def hide(monkeypatch, *packages: str) -> None:
    for name in packages:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def no_ray(monkeypatch, tmp_path):
    """Runs the command in an empty directory and fails if it gets as far as starting Ray."""
    monkeypatch.chdir(tmp_path)

    def started(*args, **kwargs):
        raise AssertionError("the command started Ray before its usage error")

    # tdscheme.cli exports main(), which hides its module of that name from attribute access
    monkeypatch.setattr(sys.modules["tdscheme.cli.main"], "_start_ray_while_importing", started)
    return tmp_path


def usage_error(capsys, args: list[str]) -> str:
    """The one ``error:`` line of a command that must exit with status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(
    ("args", "hidden", "option", "extra"),
    [
        (["train", "impala-pong"], ("envpool",), "--env-backend", "envpool"),
        (["bench", "impala-pong"], ("envpool",), "--env-backend", "envpool"),
        # (the id is checked with the setting given: ale-py registers gymnasium's Atari ids)
        (["train", "impala-pong", "--env-backend", "gymnasium"], ("ale_py",), "--env-backend",
         "atari"),
        (["train", "impala-pong", "--env-backend", "gymnasium"], ("cv2",), "--env-id", "atari"),
        (["train", "sac-halfcheetah"], ("mujoco",), "--env-id", "mujoco"),
        (["train", "--logger", "wandb"], ("wandb",), "--logger", "loggers"),
        (["train", "--logger", "mlflow"], ("mlflow",), "--logger", "loggers"),
        (["train", "--logger", "tensorboard"], ("tensorboard",), "--logger", "tensorboard"),
        (["train", "--video"], ("imageio_ffmpeg",), "--video", "video"),
        (["train", "--video"], ("pygame",), "--video", "video"),  # CartPole renders with it
        (["train", "impala-pong", "--video"], ("ale_py",), "--video", "atari"),  # ale-py's screen
    ],
)  # fmt: skip
def test_a_missing_package_is_one_usage_line_naming_its_extra(
    monkeypatch, capsys, no_ray, args, hidden, option, extra
):
    hide(monkeypatch, *hidden)
    line = usage_error(capsys, args)
    assert f"argument {option}: " in line and f"pip install -c constraints.txt -e '.[{extra}]'" in line, line
    assert list(no_ray.iterdir()) == []  # no run directory made


def test_impala_pong_without_envpool_names_the_extra_and_the_other_backend(
    monkeypatch, capsys, no_ray
):
    hide(monkeypatch, "envpool")
    line = usage_error(capsys, ["train", "impala-pong"])
    assert line == (
        "tdscheme train: error: argument --env-backend: env_backend='envpool' needs envpool, "
        "which is not installed; install it with `pip install -c constraints.txt -e '.[envpool]'` "
        "in tdscheme's clone, or "
        "env_backend='gymnasium'"
    )


def saved_run(run_dir, preset) -> str:
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(preset.to_dict()))
    return str(run_dir)


def test_a_resumed_run_goes_through_the_same_checks(monkeypatch, capsys, no_ray):
    run_dir = saved_run(no_ray / "run", get_preset("impala-pong").override({"run_dir": "x"}))
    hide(monkeypatch, "envpool")
    line = usage_error(capsys, ["train", "--resume", run_dir])
    assert "argument --env-backend: " in line and "'.[envpool]'" in line
    line = usage_error(capsys, ["train", "--resume", run_dir, "--logger", "wandb"])
    assert "argument --env-backend: " in line  # the env first, then the logger
    monkeypatch.delitem(sys.modules, "envpool")
    hide(monkeypatch, "wandb")
    line = usage_error(capsys, ["train", "--resume", run_dir, "--logger", "wandb"])
    assert "argument --logger: " in line and "'.[loggers]'" in line
    assert [p.name for p in no_ray.iterdir()] == ["run"]
    assert [p.name for p in (no_ray / "run").iterdir()] == ["config.json"]


def test_eval_checks_its_packages_before_it_evaluates(monkeypatch, capsys, tmp_path):
    preset = get_preset("ppo-cartpole").override({"run_dir": str(tmp_path)})
    saved_run(tmp_path / "run", preset)
    manager = CheckpointManager(tmp_path / "run" / "checkpoints")
    for frames in (512, 1024):  # never loaded: the checks come first
        manager.save({"config": preset.to_dict()}, frames)
    hide(monkeypatch, "matplotlib")
    assert main(["eval", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "tdscheme eval: error: tdscheme eval of a run" in err and "'.[plot]'" in err
    monkeypatch.delitem(sys.modules, "matplotlib")
    hide(monkeypatch, "imageio_ffmpeg")
    assert main(["eval", str(tmp_path / "run"), "--checkpoint", "latest", "--video"]) == 1
    assert "video=True needs imageio_ffmpeg" in capsys.readouterr().err


def test_a_trainer_checks_its_logger_and_video_packages_before_it_builds_the_scheme(
    monkeypatch, tmp_path
):
    def scheme():
        raise AssertionError("the scheme was built (and Ray started) first")

    hide(monkeypatch, "wandb")
    with pytest.raises(ImportError, match=r"backend='wandb' needs wandb.*'\.\[loggers\]'"):
        Trainer(scheme, config=TrainerConfig(logger="wandb", run_dir=str(tmp_path)))
    hide(monkeypatch, "imageio")
    with pytest.raises(ImportError, match=r"video=True needs imageio.*'\.\[video\]'"):
        Trainer(scheme, config=TrainerConfig(video=True, run_dir=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_nothing_is_missing_where_every_extra_is_installed(name):
    pytest.importorskip("envpool")
    pytest.importorskip("mujoco")
    preset = get_preset(name).override({"video": True, "logger": "tensorboard", "run_dir": "x"})
    assert preset.missing_packages() == []
