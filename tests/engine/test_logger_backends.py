"""RunLogger on W&B (offline) and MLflow (a file store): metrics, config and videos read back.

No test reaches the network: W&B runs offline (W&B's own files are read back, in the
LevelDB-style log its SDK writes), MLflow writes a file store under the run directory,
telemetry is off, and W&B's server address points at a closed local port.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest

from tdscheme.engine import logger_backends
from tdscheme.engine.run_log import RunLogger, read_metrics
from tdscheme.presets import get_preset

needs_wandb = pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None,
    reason="wandb is not installed (pip install 'tdscheme[loggers]')",
)
needs_mlflow = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None,
    reason="mlflow is not installed (pip install 'tdscheme[loggers]')",
)
needs_video = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("imageio_ffmpeg", "pygame")),
    reason="the video extra is not installed (pip install 'tdscheme[video]')",
)

CONFIG = {"preset": "ppo-cartpole", "algo": {"lr": 0.001, "hidden_sizes": (64, 64)}}


@pytest.fixture
def offline(monkeypatch):
    """No network: telemetry off, W&B's server a closed local port, no tracking server."""
    for name in ("WANDB_MODE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")


def log_a_short_run(run_dir: Path, backend: str) -> None:
    with RunLogger(run_dir, backend=backend) as run_log:
        run_log.log_hparams(CONFIG)
        for step in (512, 1024):
            run_log.log_scalars({"train/loss": 1.0 / step, "eval/return": step / 10.0}, step=step)


# -- W&B ----------------------------------------------------------------------------------


def wandb_records(run_dir: Path) -> list:
    """The records of the one offline W&B run under ``run_dir/wandb`` (its ``run-<id>.wandb``).

    The file is a 7-byte header (``:W&B``, magic, version) then LevelDB's log format:
    32 KiB blocks of chunks, each ``crc32 (4) | length (2, little-endian) | type (1)``
    (1 full, 2 first, 3 middle, 4 last) and the bytes of a ``wandb_internal_pb2.Record``.
    """
    from wandb.proto import wandb_internal_pb2

    [path] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    records, pending, offset, block = [], b"", 7, 32 * 1024
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header: padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        if kind == 0:  # zero padding at the end of a block
            offset += block - offset % block
            continue
        pending += data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history_and_config(run_dir: Path) -> tuple[list[dict], dict]:
    """The history rows (a media value, e.g. a video, as a dict of its fields) and the config."""
    history, config = [], {}
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row: dict = {}
            for item in record.history.item:
                name, *fields = [item.key] if item.key else list(item.nested_key)
                value = json.loads(item.value_json)
                if fields:
                    row.setdefault(name, {})["/".join(fields)] = value
                else:
                    row[name] = value
            history.append(row)
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
    return history, config


@needs_wandb
def test_wandb_offline_run_holds_the_metrics_and_config(tmp_path, offline, capfd):
    run_dir = tmp_path / "ppo-cartpole-1"
    log_a_short_run(run_dir, "wandb")
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "W&B printed on the terminal"
    history, config = wandb_history_and_config(run_dir)
    rows = [row for row in history if "train/loss" in row]
    assert [(r["train/step"], r["train/loss"]) for r in rows] == [(512, 1 / 512), (1024, 1 / 1024)]
    assert [r["eval/return"] for r in rows] == [51.2, 102.4]
    assert config["preset"] == "ppo-cartpole" and config["algo/lr"] == 0.001
    assert config["algo/hidden_sizes"] == "(64, 64)"
    assert config["tdscheme_version"] == __import__("tdscheme").__version__
    assert read_metrics(run_dir)["eval/return"] == [(512, 51.2), (1024, 102.4)]  # still the truth


# -- MLflow -------------------------------------------------------------------------------


def mlflow_run(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient((run_dir / "mlruns").resolve().as_uri())
    [experiment] = [e for e in client.search_experiments() if e.name == "tdscheme"]
    [run] = client.search_runs([experiment.experiment_id])
    return client, run


@needs_mlflow
def test_mlflow_file_store_holds_the_metrics_and_config(tmp_path, offline, capfd):
    run_dir = tmp_path / "ppo-cartpole-1"
    log_a_short_run(run_dir, "mlflow")
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "MLflow printed on the terminal"
    client, run = mlflow_run(run_dir)
    assert run.info.run_name == "ppo-cartpole-1" and run.info.status == "FINISHED"
    params = run.data.params
    assert params["preset"] == "ppo-cartpole" and params["algo/lr"] == "0.001"
    assert params["tdscheme_version"] == __import__("tdscheme").__version__
    history = client.get_metric_history(run.info.run_id, "eval/return")
    assert sorted((m.step, m.value) for m in history) == [(512, 51.2), (1024, 102.4)]
    import mlflow

    assert mlflow.active_run() is None  # closing the RunLogger ended its run


@needs_mlflow
def test_each_run_in_a_process_gets_its_own_mlflow_store(tmp_path, offline):
    import os

    log_a_short_run(tmp_path / "a", "mlflow")
    assert "MLFLOW_TRACKING_URI" not in os.environ  # MLflow exported run a's; closing unset it
    log_a_short_run(tmp_path / "b", "mlflow")
    for name in ("a", "b"):
        assert mlflow_run(tmp_path / name)[1].info.run_name == name


# -- errors and videos --------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "package"), [("wandb", "wandb"), ("mlflow", "mlflow")])
def test_a_missing_package_names_the_extra(tmp_path, monkeypatch, backend, package):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == package else real_find_spec(name, *a),
    )  # fmt: skip
    with pytest.raises(ImportError, match=rf"backend='{backend}'.*'\.\[loggers\]'"):
        RunLogger(tmp_path, backend=backend)
    assert not (tmp_path / "metrics.csv").exists()  # checked before any file is opened


def a_cartpole_recording(tmp_path: Path):
    from tdscheme.engine.video import EpisodeRecorder
    from tdscheme.envs import make_env
    from tdscheme.testing import mlp_policy

    factory = functools.partial(make_env, "CartPole-v1", render_mode="rgb_array")
    with EpisodeRecorder(factory, tmp_path / "videos", max_frames=20) as recorder:
        return recorder.record(mlp_policy(4, 2), name="eval_512", seed=0)


@needs_wandb
@needs_mlflow
@needs_video
def test_videos_reach_wandb_and_mlflow(tmp_path, offline):
    recording = a_cartpole_recording(tmp_path)
    with RunLogger(tmp_path / "w", backend="wandb") as run_log:
        assert run_log.log_video("eval/video", recording, step=512)
    [video] = (tmp_path / "w").glob("wandb/offline-run-*/files/media/videos/eval/video_*.mp4")
    assert video.read_bytes() == recording.path.read_bytes()
    history, _ = wandb_history_and_config(tmp_path / "w")
    [row] = [row for row in history if "eval/video" in row]
    assert row["eval/step"] == 512 and row["eval/video"]["_type"] == "video-file"

    with RunLogger(tmp_path / "m", backend="mlflow") as run_log:
        assert run_log.log_video("eval/video", recording, step=512)
    client, run = mlflow_run(tmp_path / "m")
    [artifact] = client.list_artifacts(run.info.run_id, "videos")
    assert artifact.path == "videos/eval_512.mp4"

    with RunLogger(tmp_path / "c", backend="csv") as run_log:
        assert not run_log.log_video("eval/video", recording, step=512)  # the mp4 is the record


@needs_video
@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="tensorboard is not installed (pip install 'tdscheme[tensorboard]')",
)
def test_videos_reach_tensorboard_as_an_animated_gif(tmp_path, monkeypatch):
    import imageio.v3 as iio
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(logger_backends, "GIF_MAX_FRAMES", 4)
    recording = a_cartpole_recording(tmp_path)
    with RunLogger(tmp_path, backend="tensorboard") as run_log:
        assert run_log.log_video("eval/video", recording, step=512)
    events = EventAccumulator(str(tmp_path / "tdscheme"), size_guidance={"images": 0})
    [image] = events.Reload().Images("eval/video")
    assert image.step == 512 and (image.width, image.height) == (600, 400)
    assert image.encoded_image_string[:6] == b"GIF89a"
    gif = iio.imread(image.encoded_image_string, index=None, extension=".gif")
    stride = -(-len(recording.frames) // 4)  # every k-th frame, at most 4
    assert len(gif) == len(recording.frames[::stride]) <= 4


def test_the_package_check_imports_nothing():
    assert logger_backends.missing_package_error("csv") is None
    with pytest.raises(ValueError, match=r"backend='neptune' is invalid; accepted: csv, "):
        logger_backends.make_torchrl_logger("neptune", Path("."), "tdscheme")


@needs_wandb
@needs_video
def test_a_trainer_run_logs_metrics_config_and_videos_to_wandb(ray_clean, tmp_path, offline):
    preset = get_preset("ppo-cartpole").override({
        "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 2, "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 2,
        "eval_episodes": 2, "progress": False, "target_return": None, "total_frames": 1024,
        "eval_every_frames": 512, "logger": "wandb", "video": True, "video_max_frames": 40,
        "run_dir": str(tmp_path),
    })  # fmt: skip
    with preset.build_trainer() as trainer:
        trainer.run()
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == [
        "eval_1024.mp4", "eval_512.mp4"
    ]  # fmt: skip
    history, config = wandb_history_and_config(tmp_path)
    assert config["preset"] == "ppo-cartpole" and config["trainer/video"] is True
    assert config["tdscheme_version"] == __import__("tdscheme").__version__
    evals = [(row["eval/step"], row["eval/return"]) for row in history if "eval/return" in row]
    assert evals == read_metrics(tmp_path)["eval/return"] and [s for s, _ in evals] == [512, 1024]
    assert [row["eval/step"] for row in history if "eval/video" in row] == [512, 1024]
    assert len([row for row in history if "learner/loss" in row]) == 2


# -- resumed runs -------------------------------------------------------------------------


def log_resumed(run_dir: Path, backend: str) -> None:
    """A second session of :func:`log_a_short_run`'s run, from a checkpoint at step 512."""
    with RunLogger(run_dir, backend=backend, resume_from_step=512) as run_log:
        for step in (1024, 1536):
            run_log.log_scalars({"eval/return": step / 10.0 + 1.0}, step=step)


def saved_ids(run_dir: Path) -> dict:
    return json.loads((run_dir / logger_backends.LOGGER_RUN_FILE).read_text())


@needs_wandb
def test_a_resumed_run_continues_its_wandb_run(tmp_path, offline):
    run_dir = tmp_path / "run"
    log_a_short_run(run_dir, "wandb")
    run_id = saved_ids(run_dir)["wandb"]["id"]
    log_resumed(run_dir, "wandb")
    assert saved_ids(run_dir) == {"wandb": {"id": run_id}}
    # wandb names a session's folder offline-run-<time>-<id>, with "-1" added when the two
    # sessions start within the same second (as on a fast machine)
    sessions = sorted(run_dir.glob("wandb/offline-run-*"))
    same_run = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?")
    assert len(sessions) == 2 and all(same_run.fullmatch(s.name) for s in sessions)
    second = tmp_path / "second"  # the second session's files, read as wandb_records reads
    (second / "wandb").mkdir(parents=True)
    (second / "wandb" / sessions[1].name).symlink_to(sessions[1])
    [run] = [r.run for r in wandb_records(second) if r.WhichOneof("record_type") == "run"]
    assert run.run_id == run_id
    history, _ = wandb_history_and_config(second)
    assert [(r["eval/step"], r["eval/return"]) for r in history] == [(1024, 103.4), (1536, 154.6)]


@needs_mlflow
def test_a_resumed_run_continues_its_mlflow_run(tmp_path, offline):
    run_dir = tmp_path / "run"
    log_a_short_run(run_dir, "mlflow")
    first = saved_ids(run_dir)["mlflow"]
    log_resumed(run_dir, "mlflow")
    client, run = mlflow_run(run_dir)  # one run in the store: the same one
    assert run.info.run_id == first["run_id"] == saved_ids(run_dir)["mlflow"]["run_id"]
    assert run.info.status == "FINISHED" and run.data.params["preset"] == "ppo-cartpole"
    history = client.get_metric_history(run.info.run_id, "eval/return")
    assert sorted((m.step, m.value) for m in history) == [
        (512, 51.2), (1024, 102.4), (1024, 103.4), (1536, 154.6)
    ]  # fmt: skip


@needs_mlflow
def test_a_run_id_of_another_mlflow_store_starts_a_new_run_with_a_warning(
    tmp_path, offline, monkeypatch, caplog
):
    run_dir = tmp_path / "run"
    log_a_short_run(run_dir, "mlflow")
    first = saved_ids(run_dir)["mlflow"]["run_id"]
    other = (tmp_path / "other").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    log_resumed(run_dir, "mlflow")
    assert "a new run starts" in caplog.text
    assert saved_ids(run_dir)["mlflow"]["run_id"] != first
    assert saved_ids(run_dir)["mlflow"]["tracking_uri"] == other


@needs_mlflow
def test_a_resumed_trainer_run_continues_its_mlflow_run(ray_clean, tmp_path, offline):
    """`tdscheme train --resume`'s path: a Trainer with resume=True logs into the same run."""
    settings = {
        "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 1, "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 2,
        "eval_episodes": 2, "progress": False, "target_return": None, "total_frames": 1024,
        "eval_every_frames": 512, "logger": "mlflow", "run_dir": str(tmp_path),
    }  # fmt: skip
    preset = get_preset("ppo-cartpole").override(settings)
    with preset.build_trainer() as trainer:
        trainer.run()
    with preset.override({"total_frames": 2048, "resume": True}).build_trainer() as trainer:
        trainer.run()
    client, run = mlflow_run(tmp_path)  # exactly one run
    assert run.info.run_id == saved_ids(tmp_path)["mlflow"]["run_id"]
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/return"))
    assert steps == [512, 1024, 1536, 2048]
