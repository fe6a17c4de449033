"""RayCollector.set_env_config on a real Ray: versioned, acknowledged, stamped, kept by restarts.

The envs observe the config they run (``EchoConfigEnv``: the observation is its
``level``), and each config pushed here is ``{"level": version}``, so every frame shows
both the version it is stamped with and the config it really ran.
"""

from __future__ import annotations

import functools
import threading
import time

import pytest
import torch

from tdscheme import RayCollector
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.engine.checkpoint import load_checkpoint, save_checkpoint
from tdscheme.envs.env_config import make_configurable_env
from tdscheme.errors import WorkerError
from tdscheme.keys import ENV_CONFIG_VERSION_KEY, ENV_TASK_KEY, WORKER_ID_KEY
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.testing import (
    EchoLevel,
    apply_echo_config,
    apply_echo_level_at_least_0,
    echo_config_env,
    kill_and_wait,
    make_env,
)

pytestmark = pytest.mark.timeout(300)

SMALL = {"num_cpus": 0.5}
#: batches of a worker that may predate an ack: its request in flight and one prefetched
PREDATING = 2
TRAJ = ("collector", "traj_ids")
# three copies whose episodes end at different steps: a switch meets copies mid-episode
echo = functools.partial(echo_config_env, 3, lengths=[3, 5, 8])


def level(version: int) -> dict[str, float]:
    return {"level": float(version)}


def versions(batch) -> torch.Tensor:
    return batch[ENV_CONFIG_VERSION_KEY]


def assert_true_stamps(batch) -> None:
    """Every frame is stamped with the version whose config it ran."""
    assert torch.equal(versions(batch), batch["next", "observation"][..., 0].long())


def assert_changes_at_resets(batch) -> None:
    changed = versions(batch)[..., 1:] != versions(batch)[..., :-1]
    new_traj = batch[TRAJ][..., 1:] != batch[TRAJ][..., :-1]
    assert not (changed & ~new_traj).any()


def echo_collector(**kwargs) -> RayCollector:
    settings = dict(
        frames_per_batch=3 * 20, total_frames=-1, num_collectors=2, remote_configs=SMALL,
        prefetch_batches=1,
    )  # fmt: skip
    return RayCollector(echo, None, **{**settings, **kwargs})


def check_after_the_ack(batches, version: int, apply: str) -> None:
    """Acknowledged: every episode started after it (with "now": every frame) runs it."""
    # a worker's first PREDATING batches after the ack may have been requested (and
    # collected) before it: the one in flight, and the one prefetch_batches=1 lets the
    # driver request ahead while the test waited for the ack; the later ones may not
    first_after: dict[int, int] = {}  # worker -> the largest traj id in those batches
    seen: dict[int, int] = {}
    checked = 0
    while checked < 6 or len(seen) < 2 or min(seen.values()) <= PREDATING:
        batch = next(batches)
        assert_true_stamps(batch)
        if apply == "reset":  # "now" changes episodes midway, on purpose
            assert_changes_at_resets(batch)
        worker = int(batch[WORKER_ID_KEY].flatten()[0])
        seen[worker] = seen.get(worker, 0) + 1
        if seen[worker] <= PREDATING:
            first_after[worker] = int(batch[TRAJ].max())
            continue
        checked += 1
        if apply == "now":
            assert (versions(batch) == version).all()
            continue
        started_after = batch[TRAJ] > first_after[worker]
        assert started_after.any() and (versions(batch)[started_after] == version).all()


def test_after_the_ack_no_later_episode_runs_an_older_config(ray_clean):
    """apply="reset" (version 1), then apply="now" (version 2), on one collector."""
    with echo_collector() as collector:
        batches = iter(collector)
        for _ in range(4):
            assert (versions(next(batches)) == 0).all()
        for version, apply in ((1, "reset"), (2, "now")):
            assert collector.set_env_config(level(version), apply=apply) == version
            assert collector.wait_for_env_config(version, timeout_s=60) == [version, version]
            check_after_the_ack(batches, version, apply)
        stats = collector.stats()
        assert stats["env_config_version"] == 2 and stats["env_config_pushes"] == 2
        assert stats["worker_env_config_versions"] == [2, 2]
        assert stats["worker_running_env_config_versions"] == [2, 2]
        assert stats["ledger"]["balanced"]


def test_a_push_to_some_workers_and_a_distribution(ray_clean):
    with echo_collector(sync=True, frames_per_batch=2 * 3 * 30) as collector:
        batches = iter(collector)
        next(batches)
        tasks = {"levels": [level(1), level(2)], "probs": [0.5, 0.5]}
        version = collector.set_env_config(tasks, worker_ids=[1], apply="now")
        assert collector.wait_for_env_config(version, timeout_s=60) == [0, 1]
        next(batches)
        batch = next(batches)  # requested after the ack (sync: one request per worker)
        assert (versions(batch[0]) == 0).all() and (batch[0][ENV_TASK_KEY] == -1).all()
        assert (versions(batch[1]) == 1).all()
        ran = batch[1]["next", "observation"][..., 0].long()
        assert torch.equal(ran, batch[1][ENV_TASK_KEY] + 1)  # level i + 1 is task i
        assert set(batch[1][ENV_TASK_KEY].unique().tolist()) == {0, 1}


def check_rebuilt_with(collector, batches, worker: int, version: int) -> None:
    """The worker, rebuilt once, ran ``version`` from its first step, never an older one."""
    rebuilt = []
    while len(rebuilt) < 2:
        batch = next(batches)
        if (
            collector.stats()["restarts_per_worker"][worker] == 1
            and int(batch[WORKER_ID_KEY].flatten()[0]) == worker
        ):
            rebuilt.append(batch)
    last = rebuilt[-1]
    assert (versions(last) == version).all()
    assert_true_stamps(last)


def test_a_worker_killed_after_a_push_is_rebuilt_with_the_pushed_config(ray_clean):
    """Killed after the push's ack (worker 0), then before it (worker 1)."""
    with echo_collector() as collector:
        batches = iter(collector)
        next(batches)
        collector.wait_for_env_config(collector.set_env_config(level(1)), timeout_s=60)
        version = collector.set_env_config(level(2), worker_ids=0)
        collector.wait_for_env_config(version, 60)
        kill_and_wait(collector.workers[0])
        check_rebuilt_with(collector, batches, worker=0, version=2)
        assert collector.stats()["worker_env_config_versions"] == [2, 1]
        collector.set_env_config(level(3), worker_ids=1)
        kill_and_wait(collector.workers[1])  # before the ack: the push may never reach it
        check_rebuilt_with(collector, batches, worker=1, version=3)
        stats = collector.stats()
        assert stats["worker_env_config_versions"] == [2, 3]
        assert stats["restarts_per_worker"] == [1, 1]


def test_env_configs_survive_a_checkpoint_and_versions_never_go_backwards(ray_clean, tmp_path):
    """Workers save the form the driver made when it pushed (a dataclass and its function
    too); the driver decodes it on load, and refuses a state older than its pushes."""
    with echo_collector(num_collectors=1) as collector:
        batches = iter(collector)
        next(batches)
        collector.wait_for_env_config(collector.set_env_config(level(1)), timeout_s=60)
        config = EchoLevel(2.0, note="ray")
        version = collector.set_env_config(config, apply="now", apply_env_config=apply_echo_config)
        collector.wait_for_env_config(version, timeout_s=60)
        state = collector.state_dict()
        assert state[0]["tdscheme"]["env_config"]["version"] == 2
        assert state[0]["tdscheme"]["driver"]["env_config_version"] == 2
        path = save_checkpoint(tmp_path / "ckpt.pt", {"collector": state})
        collector.wait_for_env_config(collector.set_env_config(level(3)), timeout_s=60)
        with pytest.raises(ValueError, match="worker 0: version 2 < 3 pushed"):
            collector.load_state_dict(state)
        # a plain torchrl RayCollector state (no tdscheme entry) holds no env configs: it
        # loads after pushes, and the workers keep the config they run
        collector.load_state_dict([{k: v for k, v in s.items() if k != "tdscheme"} for s in state])
        assert collector.stats()["env_config_version"] == 3
        for _ in range(PREDATING + 2):  # past the batches that may predate the last ack
            batch = next(batches)
            assert_true_stamps(batch)
        assert (versions(batch)[..., -1] == 3).all()
    torch.load(path, weights_only=True)
    with echo_collector(num_collectors=1) as resumed:
        resumed.load_state_dict(load_checkpoint(path)["collector"])
        assert resumed.stats()["env_config_version"] == 2
        batch = next(iter(resumed))
        assert (versions(batch) == 2).all()
        assert_true_stamps(batch)  # the env ran level 2.0, through apply_echo_config
        again = resumed.state_dict()  # what the resumed workers hold, checkpointed again
        save_checkpoint(tmp_path / "again.pt", {"collector": again})
        assert resumed.set_env_config(level(3)) == 3  # the next version after the state's
    saved = again[0]["tdscheme"]["env_config"]
    assert saved["config"]["path"] == "tdscheme.testing.probe_envs:EchoLevel"
    assert saved["apply_env_config"]["path"] == "tdscheme.testing.probe_envs:apply_echo_config"


@pytest.mark.fast
def test_bad_configs_are_named(ray_clean):
    with RayCollector(
        functools.partial(make_env, "CartPole-v1"), None, frames_per_batch=40, total_frames=-1,
        num_collectors=1, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        with pytest.raises(  # refused before it is sent: a checkpoint could not hold it
            TypeError, match=r"config\['lock'\]=.* of type _thread.lock is invalid.*accepted"
        ):
            collector.set_env_config({"lock": threading.Lock()})
        with pytest.raises(ValueError, match="apply='later' is invalid"):
            collector.set_env_config({"x": 1}, apply="later")
        with pytest.raises(ValueError, match="worker_ids=5 is invalid"):
            collector.set_env_config({"x": 1}, worker_ids=5)
        with pytest.raises(ValueError, match="probs="):
            collector.set_env_config({"levels": [1, 2], "probs": [1]})
        version = collector.set_env_config({"x": 1})
        with pytest.raises(WorkerError, match=r"collector worker \d: refused env config") as err:
            collector.wait_for_env_config(version, timeout_s=60)
        assert "GymEnv over TimeLimit (CartPoleEnv) offers no way" in str(err.value)
        # refused: the workers go on with the env as built, and the ledger balances
        batch = next(iter(collector))
        assert (versions(batch) == 0).all()


def test_a_worker_refuses_a_version_that_goes_backwards(ray_clean):
    spec = WorkerSpec(echo, None, frames_per_batch=12)
    worker = CollectorWorker(0, spec)
    try:
        assert worker.set_env_config(EnvConfigPush(level(2), version=2)) == 2
        with pytest.raises(ValueError, match="version 1 is not newer than version 2"):
            worker.set_env_config(EnvConfigPush(level(1), version=1))
    finally:
        worker.shutdown()


def test_workers_write_stamped_frames_into_a_ray_held_buffer(ray_replay_buffer):
    with RayCollector(
        echo, None, frames_per_batch=3 * 10, total_frames=-1, num_collectors=1,
        remote_configs=SMALL, replay_buffer=ray_replay_buffer,
    ) as collector:  # fmt: skip
        collector.start()
        collector.wait_for_env_config(collector.set_env_config(level(1), apply="now"), 60)
        deadline = time.monotonic() + 120
        while collector.stats()["worker_running_env_config_versions"] != [1]:
            assert time.monotonic() < deadline, collector.stats()
            time.sleep(0.2)
        with collector.pause():
            sample = ray_replay_buffer.sample(512)
    assert ENV_CONFIG_VERSION_KEY in sample.keys(True)
    assert_true_stamps(sample)
    assert 1 in versions(sample) and set(versions(sample).unique().tolist()) <= {0, 1}


def test_a_config_the_env_cannot_take_is_refused_and_the_worker_keeps_its_config(ray_clean):
    """Issue 64, points 2 and 6: refused at the acknowledgement, raised by every wait for
    it; the worker goes on with its config, and a rebuilt one starts with it, not the refused."""
    pendulum = functools.partial(make_configurable_env, "Pendulum-v1", num_envs=2)
    with RayCollector(
        pendulum, None, frames_per_batch=2 * 10, total_frames=-1, num_collectors=1,
        remote_configs=SMALL, prefetch_batches=1,
    ) as collector:  # fmt: skip
        batches = iter(collector)
        next(batches)
        good = collector.set_env_config({"g": 3.0}, apply="now")
        assert collector.wait_for_env_config(good, timeout_s=60) == [1]
        bad = collector.set_env_config({"gravity": 1.0}, apply="now")
        refused = r"collector worker 0: refused env config version 2.*PendulumEnv has no attribute"
        with pytest.raises(WorkerError, match=refused):  # before: acknowledged, then a loop
            collector.wait_for_env_config(bad, timeout_s=60)
        with pytest.raises(WorkerError, match=refused):  # reported to every wait for it
            collector.wait_for_env_config(version=bad, timeout_s=60)
        assert collector.wait_for_env_config(good, timeout_s=60) == [1]
        for seen in range(1, PREDATING + 4):  # the worker goes on with the config it took
            batch = next(batches)
            if seen > PREDATING:  # requested after the ack of version 1
                assert (versions(batch) == 1).all()
        kill_and_wait(collector.workers[0])
        rebuilt = 0
        while rebuilt < 3:
            batch = next(batches)
            if collector.stats()["restarts_per_worker"][0] == 1:
                rebuilt += 1
                assert (versions(batch) == 1).all()  # from its first step: the config it took
        stats = collector.stats()
        assert stats["restarts_per_worker"] == [1]
        assert stats["worker_env_config_versions"] == [1]
        assert stats["worker_running_env_config_versions"] == [1]


def test_a_config_the_env_raises_on_when_applied_is_refused_with_the_next_batch(ray_clean):
    """Issue 64, point 2: what no check sees is refused when applied; the worker goes back."""
    with echo_collector(num_collectors=1) as collector:
        batches = iter(collector)
        next(batches)
        checked = {"apply_env_config": apply_echo_level_at_least_0, "apply": "now"}
        good = collector.set_env_config(level(1), **checked)
        collector.wait_for_env_config(good, timeout_s=60)
        # applied, not only received: a refusal goes back to the last config applied (a push
        # superseded before any step ran it is not one)
        for _ in range(PREDATING + 2):
            if (versions(next(batches)) == 1).all():
                break
        else:
            raise AssertionError("version 1 never ran")
        bad = collector.set_env_config(level(-2), **checked)
        assert collector.wait_for_env_config(bad, timeout_s=60) == [2]  # received, not applied
        for _ in range(PREDATING + 2):  # the rollout goes on (it raised out of it before)
            batch = next(batches)
            assert_true_stamps(batch)
        assert (versions(batch) == 1).all()  # back to version 1
        when_applied = r"collector worker 0: refused env config version 2: .*below 0 \(when applied"
        with pytest.raises(WorkerError, match=when_applied):  # the next call that looks
            collector.stats()
        for _ in range(2):  # ... did not take it from the calls that wait for it
            with pytest.raises(WorkerError, match=when_applied):
                collector.wait_for_env_config(bad, timeout_s=60)
        stats = collector.stats()
        assert stats["restarts_per_worker"] == [0]
        assert stats["worker_env_config_versions"] == [1]  # a rebuilt worker runs version 1


def test_set_env_config_and_wait_for_env_config_show_their_parameters():
    """Issue 64, point 6: help() and IDEs show the parameters, not ``**kwargs``."""
    import inspect

    push = inspect.signature(RayCollector.set_env_config).parameters
    assert list(push) == ["self", "config", "worker_ids", "apply", "apply_env_config"]
    wait = inspect.signature(RayCollector.wait_for_env_config).parameters
    assert list(wait) == ["self", "version", "timeout_s"]
    assert "refused" in RayCollector.wait_for_env_config.__doc__
