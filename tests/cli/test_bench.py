"""`tdscheme bench PRESET`: the preset's collection rate beside the bare loop's limit."""

from __future__ import annotations

import json

import pytest
from torchrl.envs import CatFrames, SerialEnv, TransformedEnv

from tdscheme.cli.main import main
from tdscheme.envs import make_env
from tdscheme.rollout.bare import bare_loop_rate
from tdscheme.testing import mlp_policy

SMALL = ["--num-collectors", "2", "--num-envs", "4", "--frames-per-batch", "256",
         "--collector-resources", '{"num_cpus": 0.5}', "--seconds", "1"]  # fmt: skip


def bench_result(capsys, *args):
    assert main(["bench", *args]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("bench: "))
    return out, json.loads(line.removeprefix("bench: "))


def test_bench_prints_the_limit_tdscheme_and_each_workers_fast_path(ray_session, capsys):
    out, result = bench_result(capsys, "ppo-cartpole", *SMALL)
    assert result["preset"] == "ppo-cartpole" and result["num_envs"] == 4
    assert result["bare_fps"] > 0 and result["tdscheme_fps"] > 0 and result["tdscheme_frames"] > 0
    assert result["limit_fps"] == pytest.approx(result["bare_fps"] * result["parallel_workers"])
    assert result["of_limit"] == pytest.approx(result["tdscheme_fps"] / result["limit_fps"])
    assert result["fast_path"] == [True, True]
    assert "bare loop, one process (env steps + policy calls only):" in out
    assert "tdscheme RayCollector:" in out and "of the limit)" in out
    assert "worker 0 fast path: yes" in out and "worker 1 fast path: yes" in out


def test_bench_of_an_off_policy_preset(ray_session, capsys):
    # one worker: the two workers' lines are the test above's
    _, result = bench_result(capsys, "sac-pendulum", *SMALL, "--num-collectors", "1")
    assert result["env_id"] == "Pendulum-v1" and result["fast_path"] == [True]


@pytest.mark.fast
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bench", "dqn-pong"], "argument PRESET: invalid choice: 'dqn-pong'"),
        (["bench", "--seconds", "0"], "argument --seconds: 0.0 is not a number > 0"),
        (["bench", "--tau", "0.1"], "argument --tau: not a setting of preset ppo-cartpole"),
        (["bench", "--num-envs", "0"], "argument --num-envs: num_envs=0 is invalid"),
    ],
)
def test_bench_usage_errors_name_the_option(ray_session, capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2 and expected in capsys.readouterr().err


def test_the_bare_loop_measures_plain_envs_and_names_the_others():
    policy = mlp_policy(4, 2)
    for num_envs in (1, 8):
        rate = bare_loop_rate(
            lambda n=num_envs: make_env("CartPole-v1", num_envs=n), policy, seconds=0.2
        )
        assert rate.reason is None and rate.frames_per_s > 0 and rate.frames > 0

    # transforms are skipped: the bare loop steps the env under them
    def stacked():
        stack = CatFrames(2, -1, in_keys=["observation"])
        return TransformedEnv(make_env("CartPole-v1", num_envs=2), stack)

    assert bare_loop_rate(stacked, policy, seconds=0.1).reason is None
    serial = bare_loop_rate(lambda: SerialEnv(2, lambda: make_env("CartPole-v1")), policy,
                            seconds=0.1)  # fmt: skip
    assert serial.frames_per_s is None and "SerialEnv" in serial.reason
    pixels_policy = mlp_policy(4, 2, obs_key="pixels")
    needs = bare_loop_rate(lambda: make_env("CartPole-v1"), pixels_policy, seconds=0.1)
    assert needs.frames_per_s is None and "the policy needs more than observations" in needs.reason
