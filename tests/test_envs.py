"""tdscheme.envs: real gymnasium envs as torchrl envs, one or batched; the test kit delegates to it."""

from __future__ import annotations

import doctest
import logging
import subprocess
import sys

import pytest
import torch

import tdscheme.envs.make
from tdscheme import testing
from tdscheme.envs import make_env

ENVS = {"CartPole-v1": {"obs": 4, "action": 2}, "Pendulum-v1": {"obs": 3, "action": 1}}


def test_doctests():
    assert doctest.testmod(tdscheme.envs.make, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.parametrize("num_envs", [1, 4])
@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_keys_batch_size_and_a_short_rollout(env_id, num_envs):
    sizes = ENVS[env_id]
    batch = torch.Size([num_envs]) if num_envs > 1 else torch.Size([])
    env = make_env(env_id, num_envs=num_envs)
    try:
        assert env.batch_size == batch
        assert env.observation_spec["observation"].shape == (*batch, sizes["obs"])
        assert env.action_spec.shape == (*batch, sizes["action"])
        env.set_seed(0)
        torch.manual_seed(0)  # random actions
        td = env.rollout(10, break_when_any_done=False)
        assert td.batch_size == (*batch, 10)
        expected = {"action", "observation", "done", "terminated", "truncated"}
        assert expected <= set(td.keys())
        assert {"observation", "reward", "done", "terminated", "truncated"} <= set(
            td["next"].keys()
        )
        assert td["next", "observation"].shape == (*batch, 10, sizes["obs"])
        assert td["next", "reward"].shape == (*batch, 10, 1)
        # within an episode, the next observation of a step is the following step's one
        going_on = ~td["next", "done"][..., :-1, 0]
        following = td["observation"][..., 1:, :][going_on]
        assert torch.equal(td["next", "observation"][..., :-1, :][going_on], following)
    finally:
        env.close()


def test_a_batched_env_keeps_the_true_last_observation_of_an_episode():
    # torchrl resets the envs whose episode ended: ("next", "observation") is an
    # episode's last observation, "observation" of the following step the reset one.
    env = make_env("CartPole-v1", num_envs=4)
    try:
        env.set_seed(0)
        torch.manual_seed(0)
        td = env.rollout(100, break_when_any_done=False)
    finally:
        env.close()
    terminated = td["next", "terminated"].squeeze(-1)
    assert terminated.sum() >= 4  # random actions end CartPole episodes within ~30 steps
    last = td["next", "observation"][terminated]
    out_of_bounds = (last[:, 0].abs() > 2.4) | (last[:, 2].abs() > 0.2095)  # x, pole angle
    assert out_of_bounds.all()
    env_index, step = terminated[:, :-1].nonzero(as_tuple=True)
    reset = td["observation"][env_index, step + 1]
    assert (reset.abs() <= 0.05).all()  # CartPole resets every value to U(-0.05, 0.05)


def test_each_copy_of_a_batched_env_is_the_single_env_with_its_seed():
    # Pendulum truncates every copy at step 200 at once, then each is reset as alone.
    def constant(td):
        return td.set("action", torch.full((*td.batch_size, 1), 0.3))

    batched = make_env("Pendulum-v1", num_envs=3)
    batched.set_seed(0)  # copy i is seeded with 0 + i
    together = batched.rollout(230, constant, break_when_any_done=False)
    batched.close()
    assert together["next", "truncated"][:, 199].all()
    for i in range(3):
        single = make_env("Pendulum-v1")
        single.set_seed(i)
        alone = single.rollout(230, constant, break_when_any_done=False)
        single.close()
        for key in ("observation", ("next", "observation"), ("next", "reward")):
            assert torch.allclose(together[key][i], alone[key]), (i, key)


def test_building_a_batched_env_logs_nothing_and_needs_no_info_reader():
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    torchrl_logger = logging.getLogger("torchrl")  # its own handler; does not propagate
    level = torchrl_logger.level
    torchrl_logger.addHandler(handler)
    torchrl_logger.setLevel(logging.DEBUG)
    try:
        env = make_env("CartPole-v1", num_envs=4)
    finally:
        torchrl_logger.removeHandler(handler)
        torchrl_logger.setLevel(level)
    try:
        assert [r.getMessage() for r in records] == []
        assert type(env).__name__ == "GymWrapper" and not env.info_dict_reader
    finally:
        env.close()


def test_mujoco_warnings_are_logged_once_not_printed(capfd, caplog):
    """gymnasium's HalfCheetah model makes MuJoCo warn of a deprecation at every construction."""
    pytest.importorskip("mujoco")
    caplog.set_level(logging.DEBUG, logger="tdscheme.envs.make")
    envs = [make_env("HalfCheetah-v5", num_envs=2), make_env("HalfCheetah-v5")]
    for env in envs:
        env.close()
    out, err = capfd.readouterr()
    assert "settotalmass" not in out + err
    logged = [r for r in caplog.records if "settotalmass" in r.getMessage()]
    assert len(logged) <= 1 and all(r.levelno == logging.DEBUG for r in logged)


@pytest.mark.parametrize("num_envs", [0, -2, 1.5, True, "4"])
def test_bad_num_envs_is_an_error_naming_it(num_envs):
    with pytest.raises(
        ValueError, match=rf"num_envs={num_envs!r} is invalid; accepted: an int >= 1"
    ):
        make_env("CartPole-v1", num_envs=num_envs)


def test_the_test_kit_delegates_the_plain_case_and_keeps_its_faults():
    for num_envs in (1, 4):
        kit, plain = testing.make_env(num_envs=num_envs), make_env("CartPole-v1", num_envs=num_envs)
        try:
            assert type(kit) is type(plain) and kit.batch_size == plain.batch_size
            assert kit.full_observation_spec == plain.full_observation_spec
        finally:
            kit.close()
            plain.close()
    faulty = testing.make_env("Pendulum-v1", raise_at_step=2, obs_shape=(2, 3))
    try:
        assert faulty.observation_spec["observation"].shape == (2, 3)
        with pytest.raises(RuntimeError, match="injected failure at step 2"):
            faulty.rollout(5)
    finally:
        faulty.close()
    with pytest.raises(ValueError, match="faults and obs_shape need num_envs=1"):
        testing.make_env(num_envs=2, sleep_s=0.1)


@pytest.mark.slow  # a Python (and Ray) of its own in a subprocess
def test_the_production_path_does_not_import_the_test_kit():
    program = (
        "import importlib.util, sys\n"
        "import tdscheme.cli.main, tdscheme.cli.commands, tdscheme.collectors, tdscheme.engine\n"
        "import tdscheme.gradient_workers, tdscheme.scheme, tdscheme.scheme.grad_worker_loop\n"
        "from tdscheme.presets import PRESETS, get_preset\n"
        "for name in PRESETS:\n"
        "    if 'halfcheetah' in name and importlib.util.find_spec('mujoco') is None:\n"
        "        continue  # the mujoco extra is not installed\n"
        "    preset = get_preset(name).override({'num_envs': 2, 'eval_num_envs': 2})\n"
        "    factories = preset.factories()\n"
        "    factories['env_factory']().close()\n"
        "    factories['eval_env_factory']().close()\n"
        "    factories['policy_factory']()\n"
        "print(sorted(m for m in sys.modules if m.startswith('tdscheme.testing')))\n"
    )
    assert last_line_printed_by(program) == "[]"


def test_the_id_checks_import_no_torch():
    """``tdscheme.envs`` exports lazily: its id checks (the command's) need gymnasium only."""
    program = (
        "import sys\n"
        "from tdscheme.envs import ENV_BACKENDS, check_env_id, close_env_ids\n"
        "check_env_id('CartPole-v1')\n"
        "print(sorted(m for m in ('torch', 'torchrl', 'tensordict') if m in sys.modules))\n"
    )
    assert last_line_printed_by(program) == "[]"


def last_line_printed_by(program: str) -> str:
    """Runs ``program`` in a fresh Python (nothing imported yet); returns its last line of output."""
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]
