"""Scheme, Trainer and command with gradient workers: every mode runs, checkpoints and resumes.

Each real test trains a preset for a few steps through ``tdscheme train`` (in-process, on
the session's Ray), then resumes it through a new Trainer and checks that the learner
(weights, optimizer, scheduler, version) and the frame counter come back exactly.
"""

from __future__ import annotations

import json
import math

import pytest

from tdscheme import SchemeConfig
from tdscheme.cli import main
from tdscheme.engine import CheckpointManager, read_metrics
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.presets import get_preset, preset_from_dict
from tdscheme.testing import assert_same

# Small enough for a loaded 2-core machine: 4 envs, 256 frames per update, half a CPU each.
TINY = ["--num-collectors", "1", "--num-envs", "4", "--frames-per-batch", "256",
        "--eval-num-envs", "2", "--eval-episodes", "2", "--progress", "false",
        "--grad-worker-resources", '{"num_cpus": 0.5}', "--batch-timeout-s", "120"]  # fmt: skip
#: mode -> (preset, extra options); synchronous runs the single-learner preset with workers.
MODES = {
    "synchronous": ("ppo-cartpole", ["--num-grad-workers", "2"]),
    "asynchronous": ("a3c-cartpole", []),
    "decentralized": ("ppo-cartpole-dd", []),
}
MODE_METRICS = {
    "synchronous": ["grad_workers/preempted"],
    "asynchronous": ["grad_workers/staleness_mean", "grad_workers/staleness_max"],
    "decentralized": ["grad_workers/allreduce_ms", "grad_workers/mirror_ms"],
}


def summary_of(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("summary: "))
    return json.loads(line.removeprefix("summary: "))


# -- configuration (no Ray) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"grad_communication": "asynchronous", "decentralized": True},
         "decentralized=True is invalid with grad_communication='asynchronous'; accepted: "
         "decentralized=False, or grad_communication='synchronous'"),
        ({"num_grad_workers": 2, "frames_per_batch": 511},
         "frames_per_batch=511 is invalid with num_grad_workers=2"),
        ({"num_grad_workers": 2, "num_collectors": 2, "frames_per_batch": 514},
         "frames_per_batch=514 is invalid with num_collectors=2 per gradient worker"),
        ({"max_grad_staleness": 1}, "max_grad_staleness=1 is invalid with grad_communication="),
        ({"grads_per_step": 0, "grad_communication": "asynchronous"},
         "grads_per_step=0 is invalid; accepted: None or an int >= 1"),
        ({"num_grad_workers": 2, "decentralized": True,
          "preemption": {"fraction_workers": 0.5, "fraction_samples": 0.5}},
         "is invalid with grad_communication='synchronous', decentralized=True; accepted: None"),
        ({"grad_worker_resources": [{"num_cpus": 1}]}, "grad_worker_resources=[{'num_cpus': 1}]"),
    ],
)  # fmt: skip
def test_config_rejects_bad_gradient_worker_settings(values, expected):
    with pytest.raises(ValueError) as info:
        SchemeConfig(**values)
    assert expected in str(info.value)


def test_frames_per_batch_is_frames_per_update_in_every_mode():
    def mapped(**values):
        cfg = SchemeConfig(num_grad_workers=2, num_collectors=1, **values).grad_workers_config()
        return cfg.mode, cfg.frames_per_batch

    assert mapped(frames_per_batch=512) == ("synchronous", 256)
    assert mapped(frames_per_batch=512, decentralized=True) == ("decentralized", 256)
    assert mapped(frames_per_batch=512, grad_communication="asynchronous") == ("asynchronous", 512)
    # Collector-only settings are not used (not rejected) with gradient workers.
    assert SchemeConfig(num_grad_workers=2, sync=True, num_collectors=4, frames_per_batch=8)
    with pytest.raises(ValueError, match="num_grad_workers=0 is invalid here"):
        SchemeConfig().grad_workers_config()


def test_max_policy_lag_is_applied_to_gradient_workers():
    """Asynchronous gradients older than max_policy_lag are dropped as if max_grad_staleness said so."""

    def staleness(communication="asynchronous", **values):
        config = SchemeConfig(num_grad_workers=2, grad_communication=communication, **values)
        return config.grad_workers_config().max_grad_staleness

    assert staleness(max_policy_lag=1) == 1
    assert staleness(max_policy_lag=3, max_grad_staleness=2) == 2
    assert staleness(max_policy_lag=0, max_grad_staleness=2) == 0
    assert staleness() is None
    # Synchronous gradients are computed on the newest weights: any bound already holds.
    assert staleness("synchronous", max_policy_lag=0) is None


@pytest.mark.fast
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "ppo-cartpole-dd", "--grad-communication", "asynchronous"],
         "argument --grad-communication: decentralized=True is invalid with "
         "grad_communication='asynchronous'"),
        (["train", "a3c-cartpole", "--decentralized"],
         "argument --decentralized: decentralized=True is invalid with "
         "grad_communication='asynchronous'"),
        (["train", "--grad-communication", "gossip"],
         "argument --grad-communication: invalid choice: 'gossip'"),
        (["train", "ppo-cartpole", "--num-grad-workers", "3"],
         "argument --num-grad-workers: frames_per_batch=2048 is invalid with num_grad_workers=3"),
    ],
)  # fmt: skip
def test_bad_combinations_are_usage_errors(ray_session, capsys, tmp_path, args, expected):
    # ray_session: `train` starts Ray before parsing; it uses the session's (tests/cli/test_cli.py).
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--run-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# -- real runs: command, checkpoint, resume --------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", list(MODES))
def test_train_checkpoint_and_resume(ray_clean, tmp_path, capsys, mode):
    name, extra = MODES[mode]
    run_dir = tmp_path / "run"
    args = ["train", name, *TINY, *extra, "--total-frames", "512", "--eval-every-frames", "512",
            "--target-return", "none", "--run-dir", str(run_dir)]  # fmt: skip
    assert main(args) == 0
    summary = summary_of(capsys.readouterr().out)
    assert summary["frames"] == 512 and 8 <= summary["eval_return"] <= 500
    metrics = read_metrics(run_dir)
    for key in ("grad_workers/wait_ms", "grad_workers/apply_ms", "grad_workers/dispatch_ms",
                "grad_workers/restarts", "grad_workers/grads_applied", "learner/loss_objective",
                "learner/loss_critic", "learner/lr", "train/episode_return", "fps",
                *MODE_METRICS[mode]):  # fmt: skip
        assert key in metrics and all(math.isfinite(v) for _, v in metrics[key]), key
    saved = load_checkpoint(CheckpointManager(run_dir / "checkpoints").latest())
    assert saved["scheme"]["frames"] == 512
    assert saved["scheme"]["grad_workers"]["mode"] == mode
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0  # the driver learner's policy
    assert json.loads(capsys.readouterr().out.split("eval: ", 1)[1])["frames"] == 512

    config = json.loads((run_dir / "config.json").read_text())
    preset = preset_from_dict(config).override(
        {"run_dir": str(run_dir), "resume": True, "total_frames": 1024, "eval_every_frames": 0}
    )
    with preset.build_trainer() as trainer:
        scheme = trainer.scheme
        assert trainer.frames == 512 and scheme.coordinator.mode == mode
        assert_same(saved["scheme"]["learner"], scheme.learner.state_dict(), "driver learner")
        # What the workers continue from (rank 0's own state when decentralized).
        assert_same(saved["scheme"]["learner"], scheme.state_dict()["learner"], "workers")
        with pytest.raises(ValueError, match="saved by a scheme without gradient workers"):
            scheme.load_state_dict(_collector_state(saved["scheme"]))
        summary = trainer.run()
        assert summary["frames"] == 1024
        if mode == "decentralized":  # the driver's learner (evaluation) mirrors rank 0
            rank0 = scheme.coordinator.pool.call(0, "learner_state", timeout_s=60)
            assert_same(rank0["loss_module"], scheme.learner.state_dict()["loss_module"])
            assert rank0["version"] == scheme.learner.version
    assert [step for step, _ in read_metrics(run_dir)["frames"]][-1] == 1024


def _collector_state(state: dict) -> dict:
    """A scheme state as a collector-only Scheme writes it."""
    out = {key: value for key, value in state.items() if key != "grad_workers"}
    return {**out, "collector": {}}


# -- learning (slow) ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["ppo-cartpole-dd"])
def test_gradient_worker_presets_beat_random(ray_clean, tmp_path, name):
    """One learning check for the gradient-worker presets: a3c-cartpole's asynchronous
    gradients are learning-checked in tests/gradient_workers/test_learning.py and the preset
    trained, checkpointed and resumed above (test_train_checkpoint_and_resume)."""
    preset = get_preset(name).override(
        {
            "grad_worker_resources": {"num_cpus": 0.5},
            "target_return": 200.0,  # random: ~22; the presets' own target is 475
            "total_frames": 150_000,
            "run_dir": str(tmp_path),
            "progress": False,
        }
    )
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["target_reached"], summary
    assert read_metrics(tmp_path)["eval/return"][-1][1] == summary["eval_return"] >= 200.0
