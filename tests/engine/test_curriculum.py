"""Curricula: ThresholdCurriculum's decisions, the Trainer's runner, and a real run that resumes."""

from __future__ import annotations

import functools

import pytest
import torch

from tdscheme.engine import read_metrics
from tdscheme.engine.checkpoint import load_checkpoint, save_checkpoint
from tdscheme.engine.curriculum import CurriculumRunner, RecentEpisodes, ThresholdCurriculum
from tdscheme.episodes import FinishedEpisodes
from tdscheme.presets import get_preset
from tdscheme.rollout.env_config import env_config_push
from tdscheme.rollout.worker_collector import WorkerCollector
from tdscheme.testing import EchoLevel, apply_echo_config, echo_config_env

pytestmark = pytest.mark.timeout(600)

LEVELS = [{"g": 2.0}, {"g": 6.0}, {"g": 10.0}]


def at(version: int, returns: list[float]) -> RecentEpisodes:
    return RecentEpisodes(returns, [-1] * len(returns), [version] * len(returns), version)


def test_threshold_curriculum_promotes_and_demotes_on_the_current_level_only():
    curriculum = ThresholdCurriculum(
        LEVELS, promote_at=[-300.0, -350.0, 0.0], demote_at=-900.0, min_episodes=3
    )
    assert curriculum(at(1, [-100.0, -100.0])) is None  # too few episodes
    assert curriculum(at(1, [-500.0, -100.0, -100.0, -100.0])) == {"g": 6.0}  # the last 3
    # episodes of the old level do not count at the new one
    old = RecentEpisodes([-100.0] * 5, [-1] * 5, [1] * 5, version=2)
    assert curriculum(old) is None and curriculum.level == 1
    assert curriculum(at(2, [-950.0] * 3)) == {"g": 2.0}  # demoted
    assert curriculum.state_dict() == {"level": 0}
    curriculum.load_state_dict({"level": 2})
    assert curriculum(at(5, [-1.0] * 3)) is None  # the last level: nowhere to go


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"levels": []}, "levels=\\[\\] is invalid"),
        ({"promote_at": [1.0]}, "promote_at=\\[1.0\\] is invalid; accepted: a number, or 3"),
        ({"start_level": 3}, "start_level=3 is invalid"),
        ({"min_episodes": 0}, "min_episodes=0 is invalid"),
        ({"apply": "later"}, "apply='later' is invalid"),
    ],
)
def test_threshold_curriculum_names_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ThresholdCurriculum(**{"levels": LEVELS, "promote_at": 0.0, **kwargs})


class FakeScheme:
    """What the runner uses of a Scheme: the last step's episodes, and env-config pushes."""

    def __init__(self) -> None:
        self.last_episodes: FinishedEpisodes | None = None
        self.pushes: list[tuple] = []

    def set_env_config(self, config, *, apply, apply_env_config) -> int:
        self.pushes.append((config, apply))
        return len(self.pushes)


def test_the_runner_feeds_recent_episodes_pushes_and_round_trips_its_state():
    scheme = FakeScheme()
    runner = CurriculumRunner(ThresholdCurriculum(LEVELS, promote_at=-200.0, min_episodes=2))
    runner.start(scheme, None)
    assert scheme.pushes == [({"g": 2.0}, "reset")] and runner.version == 1
    scheme.last_episodes = FinishedEpisodes([-900.0, -100.0], None, [-1, -1], [0, 1])
    assert runner.step(scheme) == {"curriculum/version": 1.0, "curriculum/level": 0.0}
    scheme.last_episodes = FinishedEpisodes([-150.0], None, None, None)  # no versions: newest
    assert runner.step(scheme) == {"curriculum/version": 2.0, "curriculum/level": 1.0}
    state = runner.state_dict()
    assert state["version"] == 2 and state["state"] == {"level": 1}
    assert state["episodes"][-1] == [-150.0, -1, 1]
    resumed = CurriculumRunner(ThresholdCurriculum(LEVELS, promote_at=-200.0, min_episodes=2))
    fresh = FakeScheme()
    resumed.start(fresh, {"curriculum": state})
    assert fresh.pushes == [] and resumed.version == 2 and resumed.curriculum.level == 1
    assert CurriculumRunner(None).step(scheme) == {}
    with pytest.raises(TypeError, match="curriculum=3 is invalid"):
        CurriculumRunner(3)


class RolloutScheme:
    """What the runner uses of a Scheme, over a real in-process rollout of ``EchoConfigEnv``."""

    def __init__(self) -> None:
        self.last_episodes: FinishedEpisodes | None = None
        self.version = 0
        self.rollout = WorkerCollector(
            functools.partial(echo_config_env, 2), None, frames_per_batch=8
        )

    def set_env_config(self, config, *, apply, apply_env_config) -> int:
        self.version += 1
        push = env_config_push(config, self.version, apply=apply, apply_env_config=apply_env_config)
        return self.rollout.env_config.stage(push)

    def state_dict(self) -> dict:
        return {"env_config": self.rollout.env_config.state_dict()}


def test_a_curriculum_with_an_apply_function_and_dataclass_levels_checkpoints(tmp_path):
    """Its levels and ``apply_env_config`` are in the workers' states: a checkpoint holds
    them, and a resumed run runs the same level with the same function."""
    levels = [EchoLevel(1.0), EchoLevel(2.0, note="harder")]

    def curriculum() -> ThresholdCurriculum:
        return ThresholdCurriculum(
            levels, promote_at=-1e9, min_episodes=1, apply="now", apply_env_config=apply_echo_config
        )  # fmt: skip

    scheme, runner = RolloutScheme(), CurriculumRunner(curriculum())
    try:
        runner.start(scheme, None)
        scheme.last_episodes = FinishedEpisodes([1.0], None, None, None)
        runner.step(scheme)  # promoted: version 2, level 1
        scheme.rollout.next_batch()
        state = {"curriculum": runner.state_dict(), "scheme": scheme.state_dict()}
        path = save_checkpoint(tmp_path / "ckpt.pt", state)
    finally:
        scheme.rollout.shutdown()
    torch.load(path, weights_only=True)
    saved = load_checkpoint(path)
    resumed_scheme, resumed = RolloutScheme(), CurriculumRunner(curriculum())
    try:
        resumed.start(resumed_scheme, saved)
        resumed_scheme.rollout.env_config.load_state_dict(saved["scheme"]["env_config"])
        assert (resumed.curriculum.level, resumed.version) == (1, 2)
        batch = resumed_scheme.rollout.next_batch()
        assert (batch["next", "observation"] == 2.0).all()  # the level it saved runs again
        latest = resumed_scheme.rollout.env_config.latest
        assert latest.config == levels[1] and type(latest.config) is EchoLevel
        assert latest.apply_env_config is apply_echo_config
    finally:
        resumed_scheme.rollout.shutdown()


def test_threshold_curriculum_refuses_what_a_checkpoint_cannot_hold_when_built():
    with pytest.raises(TypeError, match=r"apply_env_config=<function .*<lambda>.*") as err:
        ThresholdCurriculum(LEVELS, promote_at=0.0, apply_env_config=lambda env, config: None)
    assert "accepted: a module-level function or class" in str(err.value)
    with pytest.raises(TypeError, match=r"levels\[1\]\['g'\]=<object .* of type builtins.object"):
        ThresholdCurriculum([{"g": 1.0}, {"g": object()}], promote_at=0.0)
    with pytest.raises(TypeError, match="apply_env_config=3 is invalid; accepted: None or a"):
        ThresholdCurriculum(LEVELS, promote_at=0.0, apply_env_config=3)


def quick_curriculum() -> ThresholdCurriculum:
    """Promotes after every two episodes at the current gravity (any return)."""
    return ThresholdCurriculum(
        [{"g": g} for g in (2.0, 4.0, 6.0, 8.0, 10.0)], promote_at=-1e9, min_episodes=2
    )


TINY = {
    "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
    "num_epochs": 1, "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 2,
    "eval_episodes": 2, "progress": False, "target_return": None, "eval_every_frames": 0,
}  # fmt: skip


def test_a_curriculum_run_checkpoints_and_resumes_at_the_same_level_and_version(
    ray_clean, tmp_path, capsys
):
    preset = get_preset("ppo-pendulum-curriculum").derive(
        "quick", curriculum=quick_curriculum,
        **TINY, run_dir=str(tmp_path), total_frames=2048, checkpoint_every_frames=1024,
    )  # fmt: skip
    with preset.override({"progress": True}).build_trainer() as trainer:
        trainer.run()
        first = trainer._curriculum
        level, version = first.curriculum.level, first.version
        assert level >= 1 and version == level + 1  # the initial push, then one per promotion
        stats = trainer.scheme.collector.stats()
        assert stats["env_config_version"] == version
        assert stats["worker_env_config_versions"] == [version]
    # the progress bar says the level the run is at (its last state, drawn at the end)
    assert f"level={level}," in capsys.readouterr().err.rstrip().splitlines()[-1]
    saved = load_checkpoint(sorted((tmp_path / "checkpoints").glob("ckpt_*.pt"))[-1])
    assert saved["curriculum"]["version"] == version
    assert saved["curriculum"]["state"] == {"level": level}
    worker = saved["scheme"]["collector"][0]["tdscheme"]
    assert worker["env_config"]["version"] == version
    assert worker["env_config"]["config"] == {"g": [2.0, 4.0, 6.0, 8.0, 10.0][level]}
    resumed = preset.override({"resume": True, "total_frames": 4096})
    with resumed.build_trainer() as trainer:
        runner = trainer._curriculum
        assert (runner.curriculum.level, runner.version) == (level, version)
        assert trainer.scheme.collector.stats()["env_config_version"] == version
        trainer.run()
        assert runner.version > version  # it went on from there
    metrics = read_metrics(tmp_path)
    versions = [v for _, v in metrics["curriculum/version"]]
    assert versions == sorted(versions) and versions[-1] == runner.version
