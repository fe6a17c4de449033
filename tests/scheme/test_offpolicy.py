"""Off-policy Schemes on a real Ray: a driver-held and a Ray-held replay buffer, DQN on CartPole."""

from __future__ import annotations

import functools
import itertools
import math
import time

import pytest
import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.envs import GymEnv
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss

from tdscheme import Learner, LearnerConfig, Scheme, SchemeConfig
from tdscheme.envs import make_env
from tdscheme.envs.faulty import make_faulty_env
from tdscheme.learner import OffPolicyLearner, make_target_updater
from tdscheme.presets import get_preset

ENV = functools.partial(make_env, "CartPole-v1")
# CartPole recording its episodes (torchrl's RewardSum and StepCounter), as a preset's
RECORDING_ENV = get_preset("dqn-cartpole").override({"num_envs": 1}).factories()["env_factory"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def dqn_modules() -> dict[str, torch.nn.Module]:
    spec = GymEnv("CartPole-v1").action_spec
    qvalue = QValueActor(
        MLP(in_features=4, out_features=2, num_cells=[32]), in_keys=["observation"], spec=spec
    )
    actor = TensorDictSequential(qvalue, EGreedyModule(spec, annealing_num_steps=1000))
    return {"actor": actor, "qvalue": qvalue}


def dqn_learner(*, actor, qvalue, config: LearnerConfig | None = None) -> OffPolicyLearner:
    loss = DQNLoss(qvalue, action_space="one-hot", delay_value=True)
    return OffPolicyLearner(
        loss, target_updater=make_target_updater(loss, kind="hard", hard_update_interval=20),
        policy=actor, config=config,
    )  # fmt: skip


def plain_learner(*, actor, qvalue) -> Learner:
    return Learner(DQNLoss(qvalue, action_space="one-hot", delay_value=True), policy=actor)


def local_buffer() -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=32)


def ray_buffer() -> RayReplayBuffer:
    return RayReplayBuffer(storage=functools.partial(LazyTensorStorage, 10_000), batch_size=32)


def scheme(
    storage_factory=local_buffer, learner_factory=dqn_learner, env_factory=ENV, **config
) -> Scheme:
    return Scheme(
        env_factory=env_factory, policy_factory=dqn_modules, learner_factory=learner_factory,
        storage_factory=storage_factory, config=SchemeConfig(**config),
    )  # fmt: skip


def run_until(s: Scheme, frames: int) -> list[dict[str, float]]:
    out = []
    while s.frames < frames:
        out.append(s.step())
    return out


# "driver" buffers run through the presets' tests (tests/presets/test_offpolicy.py), which
# check the same count; one scheme here keeps the suite's time down.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("location", ["ray"])
def test_updates_follow_utd_ratio_after_random_frames(ray_clean, location):
    init, utd = 96, 0.3
    storage = local_buffer if location == "driver" else ray_buffer
    with scheme(
        storage, num_collectors=2, frames_per_batch=64, utd_ratio=utd, init_random_frames=init,
        buffer_location=location, collector_resources={"num_cpus": 0.5},
        env_factory=RECORDING_ENV,
    ) as s:  # fmt: skip
        history = run_until(s, 400)
        last = history[-1]
        expected = math.floor((s.frames - init) * utd + 1e-9)
        assert last["replay/updates"] == expected == s.learner.version
        assert last["replay/utd_ratio"] == pytest.approx(utd, abs=1 / (s.frames - init))
        assert len(s.replay_buffer) >= s.frames
        # random frames first: the first step's updates count only what came after them
        # (a Ray-held buffer may hold more than init_random_frames by the first step)
        first = history[0]
        assert first["replay/updates"] == math.floor(max(0.0, first["frames"] - init) * utd + 1e-9)
        assert last["collector/frames_lost"] == 0
        assert last["learner/sample_ms"] >= 0 and math.isfinite(last["learner/loss"])
        assert "policy_lag/mean" in last and last["policy_lag/max"] >= 0
        assert s.collector.policy_version >= 1
        if location == "driver":
            assert last["replay/size"] == s.frames and last["replay/extend_ms"] > 0
            assert last["collector/frames"] == s.frames
        else:
            assert last["collector/frames"] >= s.frames  # workers keep writing
            # however far the workers run ahead, a step counts at most frames_per_batch
            counted = [b["frames"] - a["frames"] for a, b in itertools.pairwise(history)]
            assert max([history[0]["frames"], *counted]) <= 64, counted
            assert last["replay/frames_pending"] >= 0
            # the driver never sees the frames: the workers report the episodes they wrote
            returns = [m["train/episode_return"] for m in history if "train/episode_return" in m]
            assert returns and all(1 <= r <= 500 for r in returns), returns
            # the learner paces the writers: with no step, they hold once a step's frames
            # (prefetch_batches=1 x 64) wait, past it only a batch each (32) and the requests
            # in flight (2 each)
            time.sleep(1.5)
            assert 64 <= s.collector.collected_frames - s.frames <= 64 + 2 * 32
            held = len(s.replay_buffer)
            assert held - s.collector.collected_frames <= 2 * 2 * 32
            time.sleep(1.0)
            assert len(s.replay_buffer) == held


@pytest.mark.fast
@pytest.mark.timeout(60)
def test_bad_combinations_are_clear_errors(ray_clean):
    with pytest.raises(ValueError, match=r"storage_factory=.* is invalid with num_grad_workers=2"):
        scheme(num_grad_workers=2, num_collectors=1, frames_per_batch=64)
    for bad in (0, -1.0, math.inf):
        with pytest.raises(ValueError, match=rf"utd_ratio={bad!r} is invalid; accepted"):
            SchemeConfig(utd_ratio=bad)
    with pytest.raises(ValueError, match="init_random_frames=-1 is invalid"):
        SchemeConfig(init_random_frames=-1)
    with pytest.raises(ValueError, match="buffer_location='gpu' is invalid"):
        SchemeConfig(buffer_location="gpu")
    with pytest.raises(TypeError, match=r"local TensorDictReplayBuffer but buffer_location='ray'"):
        scheme(local_buffer, buffer_location="ray")
    with pytest.raises(TypeError, match="accepted with a storage_factory: a tdscheme OffPolicy"):
        scheme(learner_factory=plain_learner)
    with pytest.raises(TypeError, match="storage_factory=3 is not callable"):
        scheme(storage_factory=3)


@pytest.mark.timeout(120)
def test_a_state_with_the_old_counter_inside_replay_loads(ray_clean):
    with scheme(
        num_collectors=1, frames_per_batch=64, utd_ratio=0.25, init_random_frames=0,
        weight_push_interval=1000, collector_resources={"num_cpus": 0.5},
    ) as s:  # fmt: skip
        s.step()
        state = s.state_dict()
        assert state["updates_since_push"] == 16 and "updates_since_push" not in state["replay"]
        old = {key: value for key, value in state.items() if key != "updates_since_push"}
        old["replay"] = {**state["replay"], "updates_since_push": 7}  # as saved before
        s.load_state_dict(old)
        assert s.state_dict()["updates_since_push"] == 7


@pytest.mark.timeout(180)
def test_nan_rewards_off_policy_are_skipped_counted_then_stop_the_run(ray_clean):
    """A NaN loss is no raw SkippedStep out of Scheme.step: counted, then NonFiniteUpdateError."""
    from tdscheme.envs.faulty import make_faulty_env
    from tdscheme.errors import NonFiniteUpdateError

    learner = functools.partial(dqn_learner, config=LearnerConfig(max_nonfinite_updates=40))
    env = functools.partial(
        make_faulty_env, "CartPole-v1", nonfinite_at_step=1, nonfinite_every=True
    )
    s = Scheme(
        env_factory=env, policy_factory=dqn_modules, learner_factory=learner,
        storage_factory=local_buffer,
        config=SchemeConfig(num_collectors=1, frames_per_batch=64, utd_ratio=0.25,
                            collector_resources={"num_cpus": 0.5}),
    )  # fmt: skip
    with s:
        for _ in range(2):  # 16 updates a step, every one skipped and counted
            metrics = s.step()
            assert metrics["learner/nonfinite_skipped"] == 1.0, metrics
        assert s.learner.version == 0  # no step was taken with NaN
        with pytest.raises(NonFiniteUpdateError, match="reward"):
            s.step()  # the 40th skip in a row


@pytest.mark.fast
@pytest.mark.timeout(120)
def test_drop_nonfinite_frames_keeps_nan_out_of_a_driver_held_buffer(ray_clean):
    """The learner's drop_nonfinite_frames applies before the buffer: a sample never holds NaN."""

    dropping_learner = functools.partial(
        dqn_learner, config=LearnerConfig(drop_nonfinite_frames=True)
    )
    nan_rewards = functools.partial(
        make_faulty_env, "CartPole-v1", nonfinite_at_step=40, nonfinite_every=True
    )
    s = Scheme(
        env_factory=nan_rewards, policy_factory=dqn_modules, learner_factory=dropping_learner,
        storage_factory=local_buffer, config=SchemeConfig(
            num_collectors=1, frames_per_batch=64, init_random_frames=64, utd_ratio=0.25,
            collector_resources={"num_cpus": 0.5},
        ),
    )  # fmt: skip
    with s:
        metrics = [s.step() for _ in range(3)]
        stored = s.replay_buffer[:]
    assert metrics[-1]["replay/nonfinite_frames_dropped"] == 3 * 64 - len(stored) > 0
    assert torch.isfinite(stored["next", "reward"]).all()
    assert metrics[-1].get("learner/nonfinite_skipped_total", 0.0) == 0  # no NaN sampled
