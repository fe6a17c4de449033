"""The `tdscheme` command: train (each preset), kill and resume, eval, plot, usage errors."""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest

from tdscheme.cli.main import main
from tdscheme.engine import CheckpointManager, read_metrics

ROOT = Path(__file__).resolve().parents[1]
TDSCHEME = [sys.executable, "-m", "tdscheme.cli"]
TINY = ["--num-collectors", "1", "--num-envs", "4", "--frames-per-batch", "512",
        "--minibatch-size", "256", "--num-epochs", "2", "--eval-num-envs", "2",
        "--eval-episodes", "2", "--collector-resources", '{"num_cpus": 0.5}',
        "--progress", "false"]  # fmt: skip


# What a user's terminal showed before any progress line (Ray's token-authentication
# warning and INFO line, torchrl's INFO lines and FutureWarning from every worker).
NOISE = ("Token authentication", "Started a local Ray instance", "INFO", "info_dict_reader",
         "check_env_specs", "FutureWarning", "auto_register_policy_transforms")  # fmt: skip


def run(args, *, console=False, timeout=240, env=None):
    """Runs the command in a new process: ``python -m tdscheme.cli`` or the console script."""
    command = [str(Path(sys.executable).with_name("tdscheme"))] if console else TDSCHEME
    return subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def user_shell_env() -> dict[str, str]:
    """This environment without the ``RAY_AUTH_MODE`` that starting the session's Ray set."""
    return {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}


def join_session(ray_session) -> list[str]:
    """Options that make a subprocess join the test session's Ray instead of starting one."""
    address = ray_session.get_runtime_context().gcs_address
    return ["--ray-init-config", json.dumps({"address": address})]


def summary_of(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("summary: "))
    return json.loads(line.removeprefix("summary: "))


# -- usage errors (in-process, no subprocess) --------------------------------------------


def test_python_m_tdscheme_cli_is_the_command(capsys):
    """``python -m tdscheme.cli`` (cli/__main__.py) runs the same entry point, in process."""
    import runpy

    with pytest.raises(SystemExit) as exit_info:
        with mock.patch.object(sys, "argv", ["tdscheme", "--help"]):
            runpy.run_module("tdscheme.cli", run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage: tdscheme" in capsys.readouterr().out


# `tdscheme train` starts Ray before it parses (see tdscheme.cli); these tests hold the
# session's Ray, which the command then uses, so that no test starts one of its own.


@pytest.mark.fast
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["train", "--num-collectors", "abc"], "argument --num-collectors: invalid int value"),
        (["train", "--num-collectors", "0"], "argument --num-collectors: num_collectors=0 is invalid"),
        (["train", "--lr", "-1"], "argument --lr: lr=-1.0 is invalid"),
        (["train", "--logger", "neptune"], "argument --logger: logger='neptune' is invalid"),
        (["train", "--video-max-frames", "1"], "argument --video-max-frames: video_max_frames=1 "),
        (["train", "--collector-resources", "{bad"], "argument --collector-resources: "),
        (["train", "--hidden-sizes", "a,b"], "argument --hidden-sizes: "),
        (["train", "dqn-pong"], "argument PRESET: invalid choice: 'dqn-pong'"),
        (["train", "--tau", "0.1"], "argument --tau: not a setting of preset ppo-cartpole"),
        (["train", "dqn-cartpole", "--utd-ratio", "0"], "argument --utd-ratio: utd_ratio=0.0 is"),
        (["eval"], "the following arguments are required: CHECKPOINT"),
        (["eval", "x.pt", "--episodes", "0"], "argument --episodes: 0 is not an int >= 1"),
    ],
)  # fmt: skip
def test_bad_options_are_usage_errors_naming_the_option(ray_session, capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.fast
def test_resume_needs_a_run_directory(ray_session, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--resume", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"argument --resume: {tmp_path} has no config.json" in capsys.readouterr().err


@pytest.mark.fast
def test_conflicting_settings_are_a_usage_error(ray_session, capsys, tmp_path):
    # Gradient-worker runs and their other usage errors: tests/scheme/test_grad_worker_loop.py.
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--num-grad-workers", "2", "--decentralized", "--grad-communication",
              "asynchronous", "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert exit_info.value.code == 2
    assert "decentralized=True is invalid with grad_communication='asynchronous'" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_eval_of_a_damaged_checkpoint_names_the_file(capsys, tmp_path, damage):
    path = CheckpointManager(tmp_path).save({"config": {"preset": "ppo-cartpole"}}, 0)
    data = path.read_bytes()
    path.write_bytes(b"\x00" * 100 if damage == "garbage" else data[: len(data) - 50])
    assert main(["eval", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"checkpoint file {path} is corrupt, truncated or unreadable" in err


# -- real runs ---------------------------------------------------------------------------


def ray_processes(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


@pytest.mark.slow  # a Python (and Ray) of its own in a subprocess
def test_console_script_trains_with_its_own_ray_then_eval_and_plot(tmp_path, capsys):
    temp_dir = tempfile.mkdtemp(prefix="tds", dir="/tmp")  # short: Ray puts sockets in it
    try:
        run_dir = tmp_path / "run"
        result = run(console=True, args=[
            "train", "ppo-cartpole", *TINY, "--total-frames", "1024", "--eval-every-frames", "512",
            "--run-dir", str(run_dir), "--ray-init-config", json.dumps({"_temp_dir": temp_dir}),
        ], env=user_shell_env())  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"run directory {run_dir}" in result.stdout
        output = result.stdout + result.stderr
        assert [noise for noise in NOISE if noise in output] == [], output
        summary = summary_of(result.stdout)
        assert summary["frames"] == 1024 and summary["checkpoint"]
        assert {"config.json", "metrics.csv", "checkpoints"} <= {p.name for p in run_dir.iterdir()}
        deadline = time.monotonic() + 30
        while ray_processes(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not ray_processes(temp_dir), "the command left its Ray running"
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)

    assert main(["eval", str(run_dir), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.split("eval: ", 1)[1])
    assert report["episodes"] == 3.0 and 8 <= report["return"] <= 500 and report["frames"] == 1024

    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert (run_dir / "throughput.png").stat().st_size > 1000  # fps beside the return
    assert (
        main(["plot", str(run_dir), "--metric", "nothing", "--out", str(tmp_path / "x.png")]) == 0
    )
    assert main(["plot", str(tmp_path)]) == 1  # no metrics.csv: an error naming the directory
    assert "has no metrics.csv" in capsys.readouterr().err


def test_train_ppo_pendulum_then_a_resume_short_of_one_env_step_ends_cleanly(
    ray_clean, tmp_path, capsys
):
    # In-process (the session's Ray); a2c-cartpole runs in a process in the kill/resume test.
    run_dir = tmp_path / "run"
    assert main(["train", "ppo-pendulum", *TINY, "--total-frames", "1024", "--run-dir",
                 str(run_dir), "--target-return", "none"]) == 0  # fmt: skip
    summary = summary_of(capsys.readouterr().out)
    assert summary["frames"] == 1024 and -2000 < summary["eval_return"] < 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["preset"] == "ppo-pendulum" and config["scheme"]["num_collectors"] == 1
    assert all(v == v for _, v in read_metrics(run_dir)["learner/loss"])  # no nan

    # 1,024 frames done, 1,025 asked: the one frame left is less than a step of 4 envs,
    # so the run ends where it was (it raised StopIteration out of the Trainer).
    assert main(["train", "--resume", str(run_dir), "--total-frames", "1025"]) == 0
    assert summary_of(capsys.readouterr().out)["frames"] == 1024


@pytest.mark.fast
def test_train_without_a_run_directory_writes_nothing(ray_clean, tmp_path, capsys, monkeypatch):
    # --run-dir none: the help promises no logs and no checkpoints, and the run still reports.
    monkeypatch.chdir(tmp_path)
    assert main(["train", "ppo-pendulum", *TINY, "--total-frames", "512", "--run-dir", "none",
                 "--target-return", "none", "--no-eval-at-end"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "no run directory (nothing written)" in out and "logs:" not in out
    summary = summary_of(out)
    assert summary["frames"] == 512 and summary["run_dir"] is None and summary["checkpoint"] is None
    assert list(tmp_path.iterdir()) == []


def test_train_appo_cartpole_resume_and_plot_its_policy_lag(ray_clean, tmp_path, capsys):
    # impala-cartpole runs through the API (tests/presets); APPO's CLI run resumes too.
    run_dir = tmp_path / "run"
    common = [*TINY, "--target-return", "none", "--max-policy-lag", "3", "--run-dir", str(run_dir)]
    assert main(["train", "appo-cartpole", *common, "--total-frames", "1024"]) == 0
    assert summary_of(capsys.readouterr().out)["frames"] == 1024
    assert main(["train", "--resume", str(run_dir), "--total-frames", "2048"]) == 0
    summary = summary_of(capsys.readouterr().out)
    assert summary["frames"] == 2048 and summary["checkpoint"].endswith("2048.pt")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["scheme"]["async_learner"] and config["scheme"]["max_policy_lag"] == 3
    metrics = read_metrics(run_dir)
    hist = [name for name in metrics if name.startswith("policy_lag/hist/")]
    assert sorted(hist) == [f"policy_lag/hist/{lag}" for lag in ("0", "1", "2", "3+")]
    assert [step for step, _ in metrics["policy_lag/mean"]] == [512, 1024, 1536, 2048]
    assert main(["plot", str(run_dir)]) == 0
    assert "policy_lag.png" in capsys.readouterr().out
    assert (run_dir / "policy_lag.png").stat().st_size > 1000


def test_kill_then_resume_continues_the_same_run_and_verbose_shows_info_lines(
    ray_clean, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    # -v: the killed run also shows Ray's, the driver's and the workers' INFO lines; it joins
    # the session's Ray (cheaper than starting one), and Ray says it connected
    args = ["-v", "train", "a2c-cartpole", *TINY, *join_session(ray_clean), "--total-frames",
            "1000000", "--checkpoint-every-frames", "512", "--eval-every-frames", "0",
            "--run-dir", str(run_dir)]  # fmt: skip
    log = tmp_path / "output.txt"  # a file, not a pipe: unread, -v's lines would fill a pipe
    with log.open("w") as out:
        proc = subprocess.Popen([*TDSCHEME, *args], cwd=ROOT, stdout=out, stderr=out)
        manager = CheckpointManager(run_dir / "checkpoints")
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and proc.poll() is None:
                if (run_dir / "checkpoints").is_dir() and manager.list():
                    break
                time.sleep(0.2)
            assert proc.poll() is None, log.read_text()[-4000:]
            time.sleep(1.0)  # let it log a little past its checkpoint
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    output = log.read_text()
    assert "INFO worker.py" in output and "Connected to Ray cluster" in output  # Ray's
    assert "INFO tdscheme.runtime" in output  # the driver's own
    assert "(CollectorWorker pid=" in output  # a worker's, streamed by Ray
    assert "INFO tdscheme.collectors.worker.actor: collector worker 0 ready" in output
    step = int(manager.latest().name[5:17])
    before = read_metrics(run_dir)
    kept = {name: [r for r in rows if r[0] <= step] for name, rows in before.items()}

    # Resumed in-process, on the session's Ray.
    assert main(["train", "--resume", str(run_dir), "--total-frames", str(step + 1024)]) == 0
    assert summary_of(capsys.readouterr().out)["frames"] == step + 1024
    after = read_metrics(run_dir)
    steps = [s for s, _ in after["frames"]]
    assert steps == list(range(512, step + 1024 + 1, 512)), steps
    for name, rows in after.items():
        assert max(collections.Counter(s for s, _ in rows).values()) == 1, name
        assert rows[: len(kept.get(name, []))] == kept.get(name, []), name
    assert os.path.isfile(run_dir / "checkpoints" / f"ckpt_{step + 1024:012d}.pt")
    assert json.loads((run_dir / "config.json").read_text())["preset"] == "a2c-cartpole"


# -- loggers and videos -------------------------------------------------------------------


@pytest.mark.parametrize("hidden", ["mlflow", "omegaconf"])
def test_a_logger_without_its_package_is_a_usage_error_before_ray(capsys, monkeypatch, hidden):
    """Each package of the loggers extra that --logger mlflow needs is named (torchrl's
    MLFlowLogger imports omegaconf to log the hyperparameters)."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == hidden else real_find_spec(name, *a),
    )  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--logger", "mlflow"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --logger: backend='mlflow' needs {hidden}, which is not installed" in err
    assert "pip install -c constraints.txt -e '.[loggers]'" in err


@pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("mlflow", "imageio_ffmpeg", "pygame")),
    reason="the loggers and video extras are not installed (pip install 'tdscheme[loggers,video]')",
)
def test_train_on_mlflow_with_videos_then_eval_records_one(
    ray_clean, tmp_path, capsys, monkeypatch
):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # no network
    run_dir = tmp_path / "run"
    assert main(["train", "ppo-cartpole", *TINY, "--total-frames", "512", "--logger", "mlflow",
                 "--video", "--video-max-frames", "30", "--run-dir", str(run_dir)]) == 0  # fmt: skip
    captured = capsys.readouterr()
    hint = f"MLflow file store {run_dir}/mlruns (mlflow ui --backend-store-uri {run_dir}/mlruns)"
    assert hint in captured.out.splitlines()  # tdscheme's own line; MLflow itself is quiet:
    output = (captured.out + captured.err).replace(hint, "").replace(str(tmp_path), "RUN")
    assert "mlflow" not in output.lower(), output
    assert [p.name for p in (run_dir / "videos").iterdir()] == ["eval_512.mp4"]
    client = MlflowClient((run_dir / "mlruns").as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("tdscheme").experiment_id])
    assert (
        run.data.params["preset"] == "ppo-cartpole" and run.data.params["trainer/video"] == "True"
    )
    [(step, value)] = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                             "eval/return")]  # fmt: skip
    assert read_metrics(run_dir)["eval/return"] == [(step, value)] and step == 512
    assert [a.path for a in client.list_artifacts(run.info.run_id, "videos")] == [
        "videos/eval_512.mp4"
    ]

    assert main(["eval", str(run_dir), "--episodes", "1", "--seed", "7", "--video"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.split("eval: ", 1)[1])
    assert report["video"] == str(run_dir / "videos" / "eval_512_seed7.mp4")
    assert f"video: {report['video']} (" in out and Path(report["video"]).stat().st_size > 0


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="tensorboard is not installed (pip install 'tdscheme[tensorboard]')",
)
def test_the_summary_says_where_tensorboards_events_are(tmp_path, capsys):
    """As for W&B and MLflow: the line names the folder the run's events are in."""
    from tdscheme.cli.commands import _print_summary
    from tdscheme.engine.run_log import RunLogger
    from tdscheme.engine.trainer_config import TrainerConfig

    with RunLogger(tmp_path, backend="tensorboard") as run_log:
        run_log.log_scalars({"eval/return": 1.0}, step=1)
    summary = {"frames": 1, "elapsed_s": 1.0, "eval_return": None, "target_return": None,
               "checkpoint": None, "run_dir": str(tmp_path)}  # fmt: skip
    _print_summary(summary, 0.0, resumed=False, trainer=TrainerConfig(logger="tensorboard"))
    [line] = [s for s in capsys.readouterr().out.splitlines() if s.startswith("TensorBoard")]
    assert line == f"TensorBoard events in {tmp_path}/tdscheme (tensorboard --logdir {tmp_path})"
    assert list((tmp_path / "tdscheme").rglob("events.out.tfevents.*"))
