"""Env configs in a worker's rollout: applied per copy at its reset (or at once), stamped per frame.

In-process, no Ray: :class:`~tdscheme.rollout.worker_collector.WorkerCollector` over envs
whose observation is the config they run (``EchoConfigEnv``), so every frame shows both
what it ran and what it was stamped with.
"""

from __future__ import annotations

import functools
import threading

import gymnasium as gym
import pytest
import torch
from torchrl.envs import GymWrapper, RewardSum, StepCounter, TransformedEnv

from tdscheme.engine.checkpoint import load_checkpoint, save_checkpoint
from tdscheme.envs import make_env
from tdscheme.envs.env_config import (
    EnvAttributes,
    TaskDistribution,
    as_distribution,
    env_config_target,
    make_configurable_env,
)
from tdscheme.episodes import EpisodeStarts, finished_episodes
from tdscheme.keys import ENV_CONFIG_VERSION_KEY, ENV_TASK_KEY
from tdscheme.rollout.env_config import EnvConfigPush, EnvConfigRunner, env_config_push
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.rollout.worker_collector import WorkerCollector
from tdscheme.testing import (
    EchoConfigEnv,
    EchoLevel,
    apply_echo_config,
    apply_echo_level_at_least_0,
    echo_config_env,
)

pytestmark = pytest.mark.timeout(120)

TRAJ = ("collector", "traj_ids")


def level(version: int) -> dict[str, float]:
    return {"level": float(version)}


def ran(batch) -> torch.Tensor:
    """The level each frame's step ran under (the env observes it after the step)."""
    return batch["next", "observation"][..., 0].long()


def assert_stamps_true(batch) -> None:
    """Every frame is stamped with the version whose config it ran."""
    assert torch.equal(batch[ENV_CONFIG_VERSION_KEY], ran(batch))


def assert_changes_at_resets(batch) -> None:
    """Within a trajectory (of one copy) the version never changes."""
    versions, traj = batch[ENV_CONFIG_VERSION_KEY], batch[TRAJ]
    changed = versions[..., 1:] != versions[..., :-1]
    new_traj = traj[..., 1:] != traj[..., :-1]
    assert not (changed & ~new_traj).any()


def bare_next_step_env(lengths: list[int]) -> gym.vector.SyncVectorEnv:
    """gymnasium's default vector env (NEXT_STEP), handed to the worker bare (torchrl's
    ``GymWrapper`` refuses NEXT_STEP)."""
    copies = [functools.partial(EchoConfigEnv, n) for n in lengths]
    return gym.vector.SyncVectorEnv(copies, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize(
    ("autoreset", "collector_class"),
    [("DISABLED", None), ("DISABLED", Collector), ("SAME_STEP", None), ("SAME_STEP", Collector),
     ("NEXT_STEP", None)],
)  # fmt: skip
def test_reset_applies_per_copy_at_its_own_reset(autoreset, collector_class):
    """Copies reset at different steps; each takes the new config at its own next reset."""
    env_fn = functools.partial(echo_config_env, 3, autoreset=autoreset, lengths=[3, 5, 7])
    if autoreset == "NEXT_STEP":
        env_fn = functools.partial(bare_next_step_env, [3, 5, 7])
    kwargs = {} if collector_class is None else {"collector_class": collector_class}
    rollout = WorkerCollector(env_fn, None, frames_per_batch=3 * 8, **kwargs)
    assert rollout.fast_path() is True or collector_class is Collector
    try:
        first = rollout.next_batch()
        assert (first[ENV_CONFIG_VERSION_KEY] == 0).all() and (first[ENV_TASK_KEY] == -1).all()
        assert rollout.env_config.stage(EnvConfigPush(level(1), version=1)) == 1
        batch = rollout.next_batch()
        assert_stamps_true(batch)
        assert_changes_at_resets(batch)
        # mid-episode copies kept version 0, then every copy switched at its own reset
        assert (batch[ENV_CONFIG_VERSION_KEY][:, 0] == 0).any()
        assert (batch[ENV_CONFIG_VERSION_KEY][:, -1] == 1).all()
        started_after = batch[TRAJ] > first[TRAJ].max()
        assert (batch[ENV_CONFIG_VERSION_KEY][started_after] == 1).all()
    finally:
        rollout.shutdown()


@pytest.mark.parametrize("collector_class", [None, Collector])
def test_now_applies_before_the_next_step_of_every_copy(collector_class):
    env_fn = functools.partial(echo_config_env, 2, lengths=[4, 9])
    kwargs = {} if collector_class is None else {"collector_class": collector_class}
    rollout = WorkerCollector(env_fn, None, frames_per_batch=2 * 6, **kwargs)
    try:
        rollout.next_batch()
        rollout.env_config.stage(EnvConfigPush(level(4), version=4, apply="now"))
        batch = rollout.next_batch()
        assert (batch[ENV_CONFIG_VERSION_KEY] == 4).all()
        assert_stamps_true(batch)
    finally:
        rollout.shutdown()


def test_a_config_staged_from_another_thread_mid_batch_reaches_every_later_episode():
    """The actor's control thread stages while the rollout steps: no episode that starts
    after the stage runs the old config, and the stamps stay true."""
    env_fn = functools.partial(echo_config_env, 4, lengths=[2, 3, 4, 5])
    rollout = WorkerCollector(env_fn, None, frames_per_batch=4 * 400)
    staged_at: list[int] = []

    def stage_soon() -> None:
        while rollout.progress() < 4 * 150:
            threading.Event().wait(0.001)
        staged_at.append(rollout.progress())
        rollout.env_config.stage(EnvConfigPush(level(1), version=1))

    thread = threading.Thread(target=stage_soon)
    thread.start()
    try:
        batch = rollout.next_batch()
        thread.join(30)
        # staged mid-batch: after 150 steps of 400, so the batch holds both versions
        assert len(staged_at) == 1 and 4 * 150 <= staged_at[0] < 4 * 400
        assert set(batch[ENV_CONFIG_VERSION_KEY].unique().tolist()) == {0, 1}
        assert_stamps_true(batch)
        assert_changes_at_resets(batch)
        assert (batch[ENV_CONFIG_VERSION_KEY][:, -1] == 1).all()
    finally:
        rollout.shutdown()


def test_single_env_and_transformed_env():
    def make():
        return TransformedEnv(echo_config_env(1, episode_steps=4), RewardSum())

    rollout = WorkerCollector(make, None, frames_per_batch=10)
    try:
        rollout.next_batch()
        rollout.env_config.stage(EnvConfigPush(level(2), version=2))
        batch = rollout.next_batch()
        assert_stamps_true(batch)
        assert batch[ENV_CONFIG_VERSION_KEY][-1] == 2
        assert_changes_at_resets(batch)
    finally:
        rollout.shutdown()


def test_a_rebuilt_worker_starts_with_its_config():
    push = EnvConfigPush(level(3), version=3)
    rollout = WorkerCollector(
        functools.partial(echo_config_env, 2), None, frames_per_batch=8, env_config=push
    )
    try:
        batch = rollout.next_batch()
        assert (batch[ENV_CONFIG_VERSION_KEY] == 3).all()
        assert_stamps_true(batch)
        assert rollout.env_config.state_dict() == {
            "config": level(3), "version": 3, "apply_env_config": None
        }  # fmt: skip
    finally:
        rollout.shutdown()


@pytest.mark.parametrize(
    ("config", "apply_env_config"),
    [(EchoLevel(3.0, note="hard"), None), (level(3), apply_echo_config)],
    ids=["dataclass config", "apply_env_config function"],
)
def test_a_config_and_its_function_survive_a_checkpoint_and_resume(
    config, apply_env_config, tmp_path
):
    """What a worker's state holds is what ``torch.load(weights_only=True)`` reads, and a
    resumed worker runs the config it saved: equal, of the same type, with the same function."""
    echo = functools.partial(echo_config_env, 2)
    push = env_config_push(config, 3, apply="now", apply_env_config=apply_env_config)
    rollout = WorkerCollector(echo, None, frames_per_batch=8)
    try:
        rollout.env_config.stage(push)
        rollout.next_batch()
        path = save_checkpoint(
            tmp_path / "ckpt.pt", {"env_config": rollout.env_config.state_dict()}
        )
    finally:
        rollout.shutdown()
    assert torch.load(path, weights_only=True)["state"]["env_config"]["version"] == 3
    resumed = WorkerCollector(echo, None, frames_per_batch=8)
    try:
        resumed.env_config.load_state_dict(load_checkpoint(path)["env_config"])
        batch = resumed.next_batch()
        assert (batch[ENV_CONFIG_VERSION_KEY] == 3).all()
        assert_stamps_true(batch)  # the env ran level 3
        latest = resumed.env_config.latest
        assert latest.config == config and type(latest.config) is type(config)
        assert latest.apply_env_config is apply_env_config
        assert resumed.env_config.state_dict() == rollout.env_config.state_dict()
    finally:
        resumed.shutdown()


def test_what_a_checkpoint_cannot_hold_is_refused_when_pushed():
    with pytest.raises(TypeError, match=r"apply_env_config=<function .*<lambda>.*") as err:
        env_config_push(level(1), 1, apply_env_config=lambda env, config: None)
    assert "accepted: a module-level function or class" in str(err.value)
    with pytest.raises(TypeError, match=r"config\['x'\]=<object .* of type builtins.object"):
        env_config_push({"x": object()}, 1)


def test_task_distributions_draw_per_copy_at_each_reset_and_reproduce():
    levels = [level(10), level(20), level(30)]
    push = EnvConfigPush({"levels": levels, "probs": [1, 1, 2]}, version=1, apply="now")

    def run(seed: int) -> torch.Tensor:
        rollout = WorkerCollector(
            functools.partial(echo_config_env, 3, lengths=[2, 3, 4]), None, frames_per_batch=60
        )
        try:
            rollout.set_seed(seed)
            rollout.env_config.stage(push)
            batch = rollout.next_batch()
            tasks = batch[ENV_TASK_KEY]
            assert (tasks >= 0).all() and (batch[ENV_CONFIG_VERSION_KEY] == 1).all()
            # each frame ran the level of the task it is stamped with
            assert torch.equal(ran(batch), torch.tensor([10, 20, 30])[tasks])
            return tasks
        finally:
            rollout.shutdown()

    tasks = run(0)
    assert len(tasks.unique()) == 3  # several levels, drawn per copy and per episode
    assert torch.equal(run(0), tasks)  # the worker's seed reproduces the draws
    assert not torch.equal(run(1), tasks)


def test_a_callable_applies_to_every_copy():
    seen = []

    def apply(env, config):
        seen.append(config)
        for copy in env._env.envs:
            copy.set_env_config(config)

    rollout = WorkerCollector(functools.partial(echo_config_env, 2), None, frames_per_batch=20)
    try:
        rollout.env_config.stage(EnvConfigPush(level(5), version=5, apply_env_config=apply))
        batch = rollout.next_batch()
        assert_stamps_true(batch)
        assert seen == [level(5)]  # one call for all copies
    finally:
        rollout.shutdown()


def test_copies_that_take_a_config_only_all_at_once_switch_at_a_batchs_start(caplog):
    """Issue 64, point 3: where one call reaches every copy, apply='reset' switches them all
    before the next batch's first step, so every frame's stamp is the config it ran."""
    rollout = WorkerCollector(
        functools.partial(echo_config_env, 2, lengths=[3, 5]), None, frames_per_batch=2 * 10
    )
    runner = rollout.env_config
    try:
        rollout.next_batch()
        with caplog.at_level("WARNING", logger="tdscheme.rollout.env_config"):
            runner.stage(EnvConfigPush(level(4), version=4, apply_env_config=apply_echo_config))
            batch = rollout.next_batch()
            assert (batch[ENV_CONFIG_VERSION_KEY] == 4).all()  # from its first step, mid-episode
            assert_stamps_true(batch)
            levels = {"levels": [level(1), level(2), level(3)]}
            runner.stage(EnvConfigPush(levels, version=5, apply_env_config=apply_echo_config))
            for _ in range(3):  # one level a batch, drawn for every copy
                batch = rollout.next_batch()
                tasks = batch[ENV_TASK_KEY]
                assert tasks.unique().numel() == 1 and (batch[ENV_CONFIG_VERSION_KEY] == 5).all()
                assert torch.equal(ran(batch), tasks + 1)
        [said] = [r.getMessage() for r in caplog.records]
        assert "switch every copy at the start of the next batch" in said
    finally:
        rollout.shutdown()


def echo_env_with_returns(lengths: list[int]) -> TransformedEnv:
    return TransformedEnv(echo_config_env(len(lengths), lengths=lengths), RewardSum())


def test_an_episode_switched_midway_counts_at_the_version_it_started_under():
    """Issue 64, point 3: a curriculum counts each episode at the version it started under.
    Copies that take a config only all at once switch mid-episode at a batch's start: the
    episodes that end after it ran both versions, and their last frame carries the new one."""
    rollout = WorkerCollector(
        functools.partial(echo_env_with_returns, [3, 5]), None, frames_per_batch=2 * 10
    )
    starts = EpisodeStarts()
    try:
        first = rollout.next_batch()
        finished_episodes(first, starts)
        push = EnvConfigPush(level(4), version=4, apply_env_config=apply_echo_config)
        rollout.env_config.stage(push)
        batch = rollout.next_batch()
        assert (batch[ENV_CONFIG_VERSION_KEY] == 4).all()  # every frame ran 4
        done = batch["next", "done"].squeeze(-1)
        began_before = (batch[TRAJ][done] <= first[TRAJ].max()).tolist()
        assert any(began_before) and not all(began_before)
        assert finished_episodes(batch).versions == [4] * len(began_before)  # at their ends
        counted = finished_episodes(batch, starts).versions
        assert counted == [0 if before else 4 for before in began_before]
    finally:
        rollout.shutdown()


def test_envpool_takes_a_callable_at_a_batchs_start():
    pytest.importorskip("envpool")
    calls = []
    rollout = WorkerCollector(
        functools.partial(make_env, "CartPole-v1", num_envs=2, backend="envpool"),
        None,
        frames_per_batch=2 * 100,
    )
    try:
        push = EnvConfigPush({"x": 1}, version=1, apply_env_config=lambda env, c: calls.append(c))
        rollout.env_config.stage(push)
        batch = rollout.next_batch()
        assert calls == [{"x": 1}]  # once, before the batch's first step
        assert (batch[ENV_CONFIG_VERSION_KEY] == 1).all()
    finally:
        rollout.shutdown()


def test_bad_configs_are_named():
    rollout = WorkerCollector(functools.partial(echo_config_env, 2), None, frames_per_batch=8)
    runner = rollout.env_config
    try:
        runner.stage(EnvConfigPush(level(2), version=2))
        with pytest.raises(ValueError, match="version 2 is not newer than version 2"):
            runner.stage(EnvConfigPush(level(1), version=2))
        with pytest.raises(ValueError, match="version 1 is not newer"):
            runner.stage(EnvConfigPush(level(1), version=1))
        with pytest.raises(ValueError, match="apply='later' is invalid"):
            runner.stage(EnvConfigPush(level(3), version=3, apply="later"))
        with pytest.raises(ValueError, match="probs=.* is invalid"):
            runner.stage(EnvConfigPush({"levels": [1, 2], "probs": [1]}, version=3))
        with pytest.raises(ValueError, match="older than version 2"):
            runner.load_state_dict({"config": level(1), "version": 1})
    finally:
        rollout.shutdown()
    cartpole = WorkerCollector(functools.partial(make_env, "CartPole-v1"), None, frames_per_batch=8)
    try:
        with pytest.raises(ValueError, match=r"GymEnv over \w*TimeLimit \(CartPoleEnv\) offers no"):
            cartpole.env_config.stage(EnvConfigPush({"x": 1}, version=1))
    finally:
        cartpole.shutdown()


def test_the_protocol_is_found_through_wrappers_and_vector_envs():
    limited = gym.wrappers.TimeLimit(EchoConfigEnv(), 5)
    target = env_config_target(GymWrapper(limited))
    assert (target.num_copies, target.per_copy) == (1, True)
    target.apply(level(7))
    assert limited.unwrapped.level == 7.0
    wrapped = TransformedEnv(echo_config_env(2), StepCounter())
    assert env_config_target(wrapped).description == "set_env_config of each SyncVectorEnv copy"
    pendulum = make_configurable_env("Pendulum-v1", num_envs=2)
    env_config_target(pendulum).apply({"g": 3.0}, copies=[0])
    assert [c.unwrapped.g for c in pendulum._env.envs] == [3.0, 10.0]
    assert isinstance(pendulum._env.envs[0], EnvAttributes)
    pendulum.close()


@pytest.mark.slow  # AsyncVectorEnv: a process per copy
def test_async_vector_envs_take_configs_through_call():
    vec = gym.vector.AsyncVectorEnv(
        [functools.partial(EchoConfigEnv, 3)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.DISABLED,
    )
    env = GymWrapper(vec)
    try:
        target = env_config_target(env)
        assert not target.per_copy and "AsyncVectorEnv.call" in target.description
        target.apply(level(6))
        assert vec.get_attr("level") == (6.0, 6.0)
    finally:
        env.close()


def test_distributions_are_checked():
    assert as_distribution(TaskDistribution([1])) == TaskDistribution([1], [1.0])
    with pytest.raises(ValueError, match="levels=\\[\\] is invalid"):
        TaskDistribution([])
    with pytest.raises(ValueError, match="probs=\\[0, 0\\] is invalid"):
        TaskDistribution([1, 2], [0, 0])
    runner = EnvConfigRunner(None)
    with pytest.raises(ValueError, match="steps its envs in other processes"):
        runner.stage(EnvConfigPush(1, version=1))


def test_a_torchrl_env_with_its_own_method_takes_configs_at_its_resets():
    from torchrl.testing.mocking_classes import CountingEnv

    class ConfiguredCountingEnv(CountingEnv):
        def set_env_config(self, config):
            self.configs.append(config)

    def make():
        env = ConfiguredCountingEnv(max_steps=3)
        env.configs = []
        return env

    rollout = WorkerCollector(make, None, frames_per_batch=8)
    try:
        assert (
            "ConfiguredCountingEnv.set_env_config"
            in env_config_target(rollout.collector.env).description
        )
        rollout.next_batch()
        rollout.env_config.stage(EnvConfigPush({"x": 1}, version=1))
        batches = [
            rollout.next_batch() for _ in range(6)
        ]  # torchrl's mock ends episodes now and then
        assert rollout.collector.env.configs == [{"x": 1}]  # once, at the first reset
        assert batches[-1][ENV_CONFIG_VERSION_KEY][-1] == 1
        for batch in batches:
            assert_changes_at_resets(batch)
    finally:
        rollout.shutdown()


def test_a_config_the_env_can_check_is_refused_when_staged_and_changes_nothing():
    """Issue 64, point 2: EnvAttributes checks its attributes when a config arrives."""
    rollout = WorkerCollector(
        functools.partial(make_configurable_env, "Pendulum-v1", num_envs=2), None,
        frames_per_batch=8,
    )  # fmt: skip
    runner = rollout.env_config
    try:
        runner.stage(EnvConfigPush({"g": 3.0}, version=1, apply="now"))
        rollout.next_batch()
        with pytest.raises(AttributeError, match="PendulumEnv has no attribute 'gravity'"):
            runner.stage(EnvConfigPush({"g": 5.0, "gravity": 1.0}, version=2, apply="now"))
        with pytest.raises(AttributeError, match="no attribute 'gravity'"):  # in a level too
            runner.stage(EnvConfigPush({"levels": [{"g": 4.0}, {"gravity": 1.0}]}, version=3))
        batch = rollout.next_batch()
        assert (batch[ENV_CONFIG_VERSION_KEY] == 1).all()
        assert [copy.unwrapped.g for copy in rollout.collector.env._env.envs] == [3.0, 3.0]
        assert runner.state_dict()["version"] == 1
    finally:
        rollout.shutdown()


@pytest.mark.parametrize("apply", ["reset", "now"])
def test_a_config_the_env_raises_on_is_refused_and_the_copies_go_back(apply):
    """Issue 64, point 2: the rollout goes on with the last config applied, the refusal kept."""
    rollout = WorkerCollector(
        functools.partial(echo_config_env, 2, lengths=[3, 5]), None, frames_per_batch=2 * 10
    )
    runner = rollout.env_config
    try:
        runner.stage(
            EnvConfigPush(
                level(1), version=1, apply="now", apply_env_config=apply_echo_level_at_least_0
            )
        )
        rollout.next_batch()
        runner.stage(
            EnvConfigPush(
                level(-2), version=2, apply=apply, apply_env_config=apply_echo_level_at_least_0
            )
        )
        batch = rollout.next_batch()  # raised out of the rollout before
        assert_stamps_true(batch)
        assert (batch[ENV_CONFIG_VERSION_KEY] == 1).all()
        assert runner.take_refused() == [(2, 1, "ValueError: level -2.0 is below 0")]
        assert runner.take_refused() == []  # reported once
        assert runner.state_dict()["version"] == 1  # a checkpoint keeps the config applied
        runner.stage(EnvConfigPush(level(3), version=3, apply="now"))
        assert (rollout.next_batch()[ENV_CONFIG_VERSION_KEY] == 3).all()
    finally:
        rollout.shutdown()


def test_a_rebuilt_worker_whose_config_the_env_refuses_starts_as_built():
    push = EnvConfigPush(level(-1), version=4, apply_env_config=apply_echo_level_at_least_0)
    rollout = WorkerCollector(
        functools.partial(echo_config_env, 2), None, frames_per_batch=8, env_config=push
    )  # raised in the constructor before: a restart loop
    try:
        batch = rollout.next_batch()
        assert_stamps_true(batch)
        assert (batch[ENV_CONFIG_VERSION_KEY] == 0).all()
        assert [r[:2] for r in rollout.env_config.take_refused()] == [(4, 0)]
    finally:
        rollout.shutdown()
