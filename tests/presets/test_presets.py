"""Presets: the registry, overrides, picklable factories and a short real run of each."""

from __future__ import annotations

import argparse
import math
import pickle

import pytest
import torch

from tdscheme.cli.options import add_setting_options
from tdscheme.engine import read_metrics
from tdscheme.presets import (
    DEFAULT_PRESET,
    PRESETS,
    OffPolicyPreset,
    get_preset,
    preset_from_dict,
)


def test_registry_gives_fresh_presets():
    assert set(PRESETS) == {"ppo-cartpole", "a2c-cartpole", "ppo-pendulum", "a3c-cartpole",
                            "ppo-cartpole-dd", "dqn-cartpole", "apex-dqn-cartpole", "sac-pendulum", "td3-pendulum",
                            "sac-halfcheetah", "impala-cartpole", "appo-cartpole", "impala-pong",
                            "appo-pong", "ppo-pong", "apex-dqn-pong", "ppo-pendulum-curriculum",
                            "ppo-mountaincar", "ppo-mountaincar-curriculum"}  # fmt: skip
    assert DEFAULT_PRESET == "ppo-cartpole"
    a, b = get_preset("ppo-cartpole"), get_preset("ppo-cartpole")
    assert a == b and a.scheme is not b.scheme
    with pytest.raises(ValueError, match="preset='dqn' is unknown; accepted: "):
        get_preset("dqn")


def test_override_validates_and_round_trips():
    preset = get_preset("ppo-pendulum").override({"lr": 1e-4, "hidden_sizes": [32], "sync": False})
    assert (preset.algo.lr, preset.algo.hidden_sizes, preset.scheme.sync) == (1e-4, (32,), False)
    assert preset_from_dict(preset.to_dict()) == preset
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        preset.override({"learning_rate": 1.0})
    with pytest.raises(ValueError, match="gamma=2 is invalid"):
        preset.override({"gamma": 2})
    with pytest.raises(ValueError, match="activation='gelu' is invalid"):
        preset.override({"activation": "gelu"})


def test_the_light_settings_name_the_built_activations():
    """settings.py (no torch) checks the names actor_critic.py builds modules from."""
    from tdscheme.presets.actor_critic import ACTIVATIONS
    from tdscheme.presets.settings import ACTIVATION_NAMES

    assert sorted(ACTIVATIONS) == sorted(ACTIVATION_NAMES)


ON_POLICY = sorted(n for n in PRESETS if not isinstance(get_preset(n), OffPolicyPreset))


@pytest.mark.parametrize("name", ON_POLICY)  # off-policy ones: tests/presets/test_offpolicy.py
def test_factories_pickle_and_build_matching_modules(name):
    preset = get_preset(name)
    factories = pickle.loads(pickle.dumps(preset.factories()))
    modules = factories["policy_factory"]()
    learner = factories["learner_factory"](**modules)
    env = factories["env_factory"]()
    try:
        td = learner.policy(env.reset())
        assert td["action"].shape[0] == preset.algo.num_envs
        assert ("episode_reward" in env.reset().keys()) and learner.lr_scheduler is not None
    finally:
        env.close()


TINY = {"num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 2, "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 2,
        "eval_episodes": 2, "total_frames": 1024, "eval_every_frames": 512, "progress": False}  # fmt: skip


# ppo-cartpole runs through the API in tests/engine/test_trainer.py.
@pytest.mark.parametrize(
    "name", ["a2c-cartpole", "ppo-pendulum", "impala-cartpole", "appo-cartpole"]
)
def test_short_real_run_through_the_api(ray_clean, tmp_path, name):
    # a2c-cartpole also checks the early stop: any CartPole return reaches a target of 1.
    target = 1.0 if name == "a2c-cartpole" else None
    preset = get_preset(name).override({**TINY, "run_dir": str(tmp_path), "target_return": target})
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    metrics = read_metrics(tmp_path)
    if target is not None:
        assert summary["target_reached"] and summary["frames"] == summary["target_frames"] == 512
        assert metrics["eval/target_reached"] == [(512, 1.0)]
    else:
        assert summary["frames"] == 1024 and not summary["target_reached"]
    if "pendulum" in name:  # 200 steps of rewards in [-16.3, 0]
        assert -16.3 * 200 <= summary["eval_return"] <= 0
    else:  # CartPole: +1 per step, so each evaluation's return is its mean episode length
        returns, lengths = metrics["eval/return"], metrics["eval/episode_length"]
        assert returns == lengths and all(8 <= r <= 500 for _, r in returns), returns
    # learning is judged by tests/presets/test_learning.py; here: every frame trained on,
    # once per step, and the asynchronous presets' batches a bounded number of pushes old
    trained = metrics["learner/num_frames"]
    steps = list(range(512, summary["frames"] + 1, 512))  # a2c-cartpole stops at 512
    assert [step for step, _ in trained] == steps and sum(v for _, v in trained) == steps[-1]
    if name in ("impala-cartpole", "appo-cartpole"):
        assert all(0 <= lag <= 4 for _, lag in metrics["policy_lag/max"]), metrics["policy_lag/max"]
    for key in ("learner/loss", "learner/loss_objective", "learner/loss_critic", "eval/return",
                "train/episode_length", "collector/fps"):  # fmt: skip
        if key == "train/episode_length" and "pendulum" in name and summary["frames"] < 800:
            continue
        assert metrics[key] and all(math.isfinite(v) for _, v in metrics[key]), key
    assert torch.get_num_threads() >= 1


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("num_envs", 0, "an int >= 1"),
        ("gamma", 2, "a number in [0, 1]"),
        ("lr", 0, "a number > 0"),
        ("max_grad_norm", -1.0, "None or a number > 0"),
        ("activation", "gelu", "'elu', 'relu', 'tanh'"),
        ("env_backend", "mujoco", "'gymnasium', 'envpool'"),
        ("max_nonfinite_updates", 0, "an int >= 1"),
        ("drop_nonfinite_frames", "yes", "True or False"),
    ],
)
def test_algo_configs_share_their_common_fields_and_checks(field, value, accepted):
    from tdscheme.presets.settings import ActorCriticConfig, AlgoConfig, OffPolicyConfig

    for cls in (AlgoConfig, ActorCriticConfig, OffPolicyConfig):
        with pytest.raises(ValueError) as err:
            cls(**{field: value})
        assert str(err.value) == f"{field}={value!r} is invalid; accepted: {accepted}", cls
    # the defaults that differ stay each algorithm's
    for config, defaults in ((ActorCriticConfig(), (16, "tanh", 0.5)),
                             (OffPolicyConfig(), (8, "relu", None))):  # fmt: skip
        assert (config.num_envs, config.activation, config.max_grad_norm) == defaults


@pytest.mark.parametrize(
    "name", ["ppo-cartpole", "impala-cartpole", "sac-pendulum", "dqn-cartpole"]
)
def test_the_nonfinite_guard_settings_reach_the_learner(name):
    """``--max-nonfinite-updates`` / ``--drop-nonfinite-frames`` set the learner's guard.

    (What the guard does with NaN frames and updates: tests/faults/test_nonfinite.py and
    tests/scheme/test_offpolicy.py; the Scheme hands ``drop_nonfinite_frames`` to a Ray-held
    buffer's workers from the learner's config.)
    """
    preset = get_preset(name)
    defaults = preset.learner_factory()(**preset.policy_factory()()).config
    assert (defaults.max_nonfinite_updates, defaults.drop_nonfinite_frames) == (3, False)
    preset = preset.override({"max_nonfinite_updates": 5, "drop_nonfinite_frames": True})
    assert preset_from_dict(preset.to_dict()) == preset
    config = preset.learner_factory()(**preset.policy_factory()()).config
    assert (config.max_nonfinite_updates, config.drop_nonfinite_frames) == (5, True)


def torques(env) -> list[float]:
    """The motor cap of each gymnasium Pendulum under a torchrl env (one, or a vector env's)."""
    gym_env = getattr(env, "base_env", env)._env
    return [c.unwrapped.max_torque for c in getattr(gym_env, "envs", [gym_env])]


def test_env_config_sets_every_copy_in_training_evaluation_and_videos():
    weak = get_preset("ppo-pendulum").override({"env_config": {"max_torque": 1.0}})
    curriculum = get_preset("ppo-pendulum-curriculum").override({"env_config": {"max_torque": 1.0}})
    for preset in (weak, curriculum):
        for factory in (preset.env_factory(), preset.eval_env_factory()):
            env = factory()
            assert torques(env) == [1.0] * env.batch_size[0]
            env.close()
    video = weak.video_env_factory()()
    assert torques(video) == [1.0]
    video.close()
    # the preset as it is stays the env as registered; the option parses JSON
    env = get_preset("ppo-pendulum").eval_env_factory()()
    assert set(torques(env)) == {2.0}
    env.close()
    parser = argparse.ArgumentParser()
    add_setting_options(parser, weak)
    args = parser.parse_args(["--env-config", '{"max_torque": 0.5}'])
    assert weak.override(vars(args)).algo.env_config == {"max_torque": 0.5}


def test_env_config_errors_name_the_setting_or_the_attribute():
    with pytest.raises(ValueError, match=r"env_config=\[1\] is invalid; accepted: None or a dict"):
        get_preset("ppo-pendulum").override({"env_config": [1]})
    with pytest.raises(ValueError, match=r"env_config=\{'g': 1\} is invalid with env_id="):
        get_preset("impala-pong").override({"env_config": {"g": 1}})
    factory = get_preset("ppo-pendulum").override({"env_config": {"gravity": 1.0}}).env_factory()
    with pytest.raises(AttributeError, match="PendulumEnv has no attribute 'gravity'"):
        factory()
