"""A Scheme with num_learners > 0: collectors feed a learner group; its state is one Learner's."""

from __future__ import annotations

import pytest
import torch

from tdscheme import Scheme
from tdscheme.learner.group import LearnerGroup
from tdscheme.presets import get_preset

SMALL = {"num_cpus": 0.5}


def tiny_preset(**overrides):
    values = {"num_envs": 4, "frames_per_batch": 256, "minibatch_size": 128, "num_epochs": 2,
              "collector_resources": SMALL, "learner_resources": SMALL, "num_collectors": 1,
              "sync": True}  # fmt: skip
    return get_preset("ppo-cartpole").override({**values, **overrides})


def build(preset) -> Scheme:
    return Scheme(**preset.factories(), config=preset.scheme)


def same(a, b) -> bool:
    return all(torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True))


def test_a_learner_group_trains_the_scheme_and_its_state_resumes_with_one_learner(ray_clean):
    with build(tiny_preset(num_learners=2)) as scheme:
        assert isinstance(scheme.loop.learner, LearnerGroup)
        history = [scheme.step() for _ in range(3)]
        assert [m["frames"] for m in history] == [256.0, 512.0, 768.0]
        assert all(m["learner/num_frames"] == 256.0 for m in history)
        assert scheme.learner.version == 3 and scheme.collector.policy_version == 3
        state = scheme.state_dict()
        # the driver's policy (collectors, evaluation) is rank 0's
        rank0 = scheme.loop.learner.pool.call(0, "state_dict", timeout_s=60)
        mirror = scheme.learner.loss_module.state_dict()
        assert all(torch.equal(value, mirror[key]) for key, value in rank0["loss_module"].items())
        trained = scheme.learner.weights()
    with build(tiny_preset(num_learners=0)) as single:
        single.load_state_dict(state)
        assert single.learner.version == 3 and same(single.learner.weights(), trained)
        single.step()
        assert single.learner.version == 4


def test_a_replay_learner_group_needs_the_ray_held_buffer():
    """buffer_location="auto" (the default) takes the Ray-held buffer for a group of ranks;
    "driver", asked for, is refused naming the one that works."""
    sac = get_preset("sac-pendulum")
    assert sac.scheme.buffer_location == "auto"
    assert sac.storage_factory().keywords["ray_held"] is False
    for ranks in (1, 2):  # every learner group needs it, one rank included
        assert sac.override({"num_learners": ranks}).storage_factory().keywords["ray_held"] is True
    preset = sac.override({"num_learners": 2, "buffer_location": "driver"})
    with pytest.raises(
        ValueError, match=r"buffer_location='driver' is invalid with num_learners=2"
    ):
        Scheme(**preset.factories(), config=preset.scheme)


def test_the_command_refuses_a_driver_held_buffer_for_a_group_in_two_lines(ray_session, capsys):
    from tdscheme.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["train", "sac-pendulum", "--num-learners", "2", "--buffer-location", "driver"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("usage: tdscheme train"), err
    assert "argument --buffer-location: buffer_location='driver' is invalid" in err[1]


# dqn-cartpole: its epsilon annealing is the exploration state the ranks must share; SAC's
# ranks are held to one learner bit for bit in tests/learner/test_group_replay.py
@pytest.mark.parametrize("name", ["dqn-cartpole"])
def test_replay_learner_groups_train_from_the_ray_held_buffer_and_resume_alone(
    ray_clean, tmp_path, name
):
    values = {"num_envs": 2, "frames_per_batch": 128, "init_random_frames": 128,
              "utd_ratio": 0.25, "buffer_location": "ray", "collector_resources": SMALL,
              "learner_resources": SMALL, "num_collectors": 1}  # fmt: skip
    preset = get_preset(name).override(values)
    with build(preset.override({"num_learners": 2})) as scheme:
        assert isinstance(scheme.loop.learner, LearnerGroup)
        history = [scheme.step() for _ in range(4)]
        updates = sum(m["replay/updates_per_step"] for m in history)
        assert updates >= 32 and scheme.learner.version == updates
        assert history[-1]["learner/num_frames"] == preset.algo.batch_size  # both ranks' shares
        assert history[-1]["policy_lag/max"] >= history[-1]["policy_lag/mean"] >= 0.0
        state = scheme.state_dict()
        rank0 = scheme.loop.learner.pool.call(0, "state_dict", timeout_s=60)
        mirror = scheme.learner.loss_module.state_dict()  # what collectors and evaluation run
        assert all(torch.equal(value, mirror[key]) for key, value in rank0["loss_module"].items())
        # the exploration the collectors run is the driver's, annealed by the frames collected
        assert state["learner"]["exploration"] == scheme.learner.state_dict()["exploration"]
        trained = scheme.learner.weights()
        scheme.loop.dump_buffer(tmp_path / "buffer")
    with build(preset) as single:
        single.load_state_dict(state)
        single.loop.load_buffer(tmp_path / "buffer")
        assert single.learner.version == updates and same(single.learner.weights(), trained)
        single.step()
        assert single.learner.version > updates


def test_appo_first_ready_batches_train_a_learner_group(ray_clean):
    preset = get_preset("appo-cartpole").override(
        {"num_envs": 4, "frames_per_batch": 256, "minibatch_size": 128, "num_epochs": 2,
         "collector_resources": SMALL, "learner_resources": SMALL, "num_collectors": 1,
         "num_learners": 2}
    )  # fmt: skip
    with build(preset) as scheme:
        history = [scheme.step() for _ in range(3)]
        assert scheme.learner.version == 3
        assert all(m["learner/num_frames"] == 256.0 for m in history)
        assert "policy_lag/max" in history[-1]
