"""Off-policy presets: factories, a short real run, checkpoint -> kill -> resume, learning checks."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import TensorDictReplayBuffer
from torchrl.envs.utils import ExplorationType
from torchrl.modules import AdditiveGaussianModule, EGreedyModule

from tdscheme.cli.main import main
from tdscheme.collectors.settings.specs import worker_specs
from tdscheme.engine import CheckpointManager, read_metrics
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.learner import OffPolicyLearner
from tdscheme.presets import get_preset, preset_from_dict
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import Collector
from tests.rollout.test_lean import assert_same_frames, batches

ROOT = Path(__file__).resolve().parents[2]
MUJOCO = importlib.util.find_spec("mujoco") is not None
NO_MUJOCO = "sac-halfcheetah needs MuJoCo: pip install -c constraints.txt -e '.[mujoco]'"
OFF_POLICY = ["dqn-cartpole", "sac-pendulum", "td3-pendulum", "sac-halfcheetah"]

#: a few hundred frames on one small worker: 128 random frames, then 0.25 steps per frame
TINY = {"num_collectors": 1, "num_envs": 2, "frames_per_batch": 128, "init_random_frames": 128,
        "utd_ratio": 0.25, "batch_size": 32, "hidden_sizes": (16, 16), "eval_num_envs": 1,
        "collector_resources": {"num_cpus": 0.5}, "eval_episodes": 1, "total_frames": 384,
        "eval_every_frames": 0, "progress": False, "target_return": None}  # fmt: skip


def cli_options(settings: dict) -> list[str]:
    out = []
    for key, value in settings.items():
        if isinstance(value, bool) and key != "progress":  # --flag / --no-flag
            out.append(("--" if value else "--no-") + key.replace("_", "-"))
            continue
        text = json.dumps(value) if isinstance(value, dict) else str(value)
        if isinstance(value, tuple):
            text = ",".join(map(str, value))
        out += ["--" + key.replace("_", "-"), "none" if value is None else text]
    return out


@pytest.mark.parametrize("name", OFF_POLICY)
def test_factories_pickle_and_build_off_policy_parts(name):
    if name == "sac-halfcheetah" and not MUJOCO:
        pytest.skip(NO_MUJOCO)
    preset = get_preset(name)
    factories = pickle.loads(pickle.dumps(preset.factories()))
    learner = factories["learner_factory"](**factories["policy_factory"]())
    assert isinstance(learner, OffPolicyLearner) and learner.target_updater is not None
    env = factories["env_factory"]()
    try:
        assert learner.policy(env.reset())["action"].shape[0] == preset.algo.num_envs
    finally:
        env.close()
    assert isinstance(factories["storage_factory"](), TensorDictReplayBuffer)
    assert preset_from_dict(preset.to_dict()) == preset
    with pytest.raises(ValueError, match="unknown setting 'clip_epsilon'"):
        preset.override({"clip_epsilon": 0.1})  # a PPO setting


def exploration_module(actor, kind: type):
    [module] = [m for m in actor.modules() if isinstance(m, kind)]
    return module


@pytest.mark.parametrize(
    ("name", "kind"), [("dqn-cartpole", EGreedyModule), ("td3-pendulum", AdditiveGaussianModule)]
)
def test_the_presets_exploration_gives_torchrls_frames_frame_for_frame(name, kind):
    """Each preset's worker (its env, its actor with its exploration module, its collector
    settings) against torchrl's Collector: random frames, then the exploring policy, with
    resets inside the batches, every key equal. The schedule is half annealed (epsilon,
    sigma mid-way), as the learner leaves it between batches."""
    preset = get_preset(name).override({"num_envs": 4})
    factories = preset.factories()
    torch.manual_seed(0)
    actor = factories["learner_factory"](**factories["policy_factory"]()).policy
    exploration_module(actor, kind).step(preset.algo.exploration_frames // 2)
    config = preset.scheme.collector_config(factories["env_factory"], actor, offpolicy=True)
    spec = worker_specs(config)[0]
    kwargs = {k: v for k, v in spec.collector_kwargs.items() if v is not None}
    kwargs["init_random_frames"] = 64 * 4  # one batch of random actions, then the policy's
    want, _ = batches(Collector, spec.create_env_fn, actor, steps=64, num_batches=3, **kwargs)
    got, reason = batches(spec.collector_class, spec.create_env_fn, actor, steps=64,
                          num_batches=3, **kwargs)  # fmt: skip
    assert spec.collector_class is LeanCollector and reason is None  # the fast path ran
    assert_same_frames(want, got)
    done = torch.cat([b["next", "done"].flatten() for b in got])
    assert done.any() or name == "td3-pendulum"  # CartPole episodes end inside the batches
    explored = got[1]["action"] if name == "td3-pendulum" else got[1]["action"].argmax(-1)
    greedy = actor[:-1](got[1].exclude("action"))["action"]  # the policy without exploring
    greedy = greedy if name == "td3-pendulum" else greedy.argmax(-1)
    assert (explored != greedy).any()  # the module did explore


def test_an_ornstein_uhlenbeck_policy_gives_torchrls_frames_frame_for_frame():
    """torchrl's OU noise (a user's DDPG actor) keeps its state in the frames ("_ou_prev_noise",
    "_ou_steps") and restarts it where InitTracker marks a new episode: tdscheme's worker
    collector gives torchrl's Collector's frames, frame for frame (on the lean path or, while
    InitTracker is not on it, on torchrl's own rollout)."""
    from torchrl.envs import Compose, InitTracker, RewardSum, StepCounter, TransformedEnv
    from torchrl.modules import OrnsteinUhlenbeckProcessModule

    from tdscheme.envs import make_env

    preset = get_preset("td3-pendulum")
    torch.manual_seed(0)
    policy = preset.policy_factory()()["policy"]
    spec = make_env("Pendulum-v1").action_spec
    actor = TensorDictSequential(
        policy, OrnsteinUhlenbeckProcessModule(spec, annealing_num_steps=10)
    )

    def env_fn():
        env = make_env("Pendulum-v1", num_envs=4)
        return TransformedEnv(env, Compose(InitTracker(), StepCounter(max_steps=50), RewardSum()))

    kwargs = {"exploration_type": ExplorationType.RANDOM}
    want, _ = batches(Collector, env_fn, actor, steps=40, num_batches=3, **kwargs)
    got, reason = batches(LeanCollector, env_fn, actor, steps=40, num_batches=3, **kwargs)
    assert_same_frames(want, got)
    assert got[1]["is_init"].any()  # episodes (and their noise) restart inside the batches
    assert not torch.equal(got[1]["action"], policy(got[1].exclude("action"))["action"])
    # InitTracker is not (yet) on the lean path: the worker runs torchrl's rollout, saying why
    assert reason is None or "InitTracker" in reason


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["td3-pendulum", "sac-halfcheetah"])
def test_short_real_run_through_the_api(ray_clean, tmp_path, name):
    if name == "sac-halfcheetah" and not MUJOCO:
        pytest.skip(NO_MUJOCO)
    preset = get_preset(name).override({**TINY, "run_dir": str(tmp_path)})
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["frames"] == 384 and math.isfinite(summary["eval_return"])
    metrics = read_metrics(tmp_path)
    assert metrics["replay/updates"][-1][1] == (384 - 128) * 0.25
    assert all(math.isfinite(v) for _, v in metrics["learner/loss"])


@pytest.mark.timeout(300)
def test_a_ray_held_buffer_takes_no_cpu_and_keeps_its_repr_off_the_terminal(ray_clean, tmp_path):
    """The README's ``--buffer-location ray`` with 2 collectors of 1 CPU each, on 2 CPUs.

    Before, the buffer's actor took torchrl's default of 1 CPU, so one collector was never
    placed and the run failed after actor_start_timeout_s; the buffer's ten-line repr (Ray's
    prefix for an actor's output) reached the terminal; and the run stopped at 256 of its 384
    frames (the last writes were never trained on).
    """
    address = ray_clean.get_runtime_context().gcs_address
    settings = {**TINY, "num_collectors": 2, "collector_resources": {"num_cpus": 1},
                "ray_init_config": {"address": address}}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tdscheme.cli", "train", "td3-pendulum", *cli_options(settings),
         "--buffer-location", "ray", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    assert "storage=LazyTensorStorage" not in printed and "[torchrl]" not in printed, printed
    checkpoints = CheckpointManager(tmp_path / "run" / "checkpoints")
    assert checkpoints.latest().name == f"ckpt_{384:012d}.pt", printed


def wait_for_checkpoint(proc: subprocess.Popen, manager: CheckpointManager, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if manager.directory.is_dir() and manager.list():
            return
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint; exit code {proc.poll()}: {proc.stderr.read()}")


def checkpointing_run(ray_session, run_dir: Path, preset: str, location: str) -> subprocess.Popen:
    """``tdscheme train PRESET`` in a subprocess joining the test Ray, checkpointing every 256 frames."""
    address = ray_session.get_runtime_context().gcs_address
    settings = {**TINY, "total_frames": 1_000_000, "checkpoint_every_frames": 256,
                "checkpoint_replay_buffer": True, "ray_init_config": {"address": address},
                "buffer_location": location}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "tdscheme.cli", "train", preset, *cli_options(settings),
         "--run-dir", str(run_dir)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize("location", ["driver", "ray"])
def test_cli_run_killed_then_resumed_restores_networks_targets_optimizer_buffer(
    ray_clean, tmp_path, location
):
    """SIGKILL mid-run, then ``--resume``: the same learning goes on, buffer included.

    A Ray-held buffer is dumped with the workers paused (its writes may run ahead of the
    frames trained on: those are trained on after the resume, not lost or counted twice).
    """
    run_dir = tmp_path / "run"
    proc = checkpointing_run(ray_clean, run_dir, "dqn-cartpole", location)
    manager = CheckpointManager(run_dir / "checkpoints")
    try:
        wait_for_checkpoint(proc, manager, timeout_s=200)
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean-up: whatever is on disk is what resumes
        proc.wait(timeout=30)
        printed = proc.stderr.read()
        proc.stderr.close()
    # the terminal shows tdscheme's lines, not torchrl's INFO records or warnings (the
    # SIGKILL leaves Python's resource tracker a line of its own)
    assert "[torchrl]" not in printed and "site-packages/torchrl/" not in printed, printed
    latest = manager.latest()
    saved = load_checkpoint(latest)
    step = int(latest.name[5:17])
    state = saved["scheme"]
    assert saved["replay_buffer"] == f"replay_{step:012d}"
    preset = preset_from_dict(json.loads((run_dir / "config.json").read_text()))
    preset = preset.override({"run_dir": str(run_dir), "resume": True, "total_frames": step + 128})
    with preset.build_trainer() as trainer:
        scheme = trainer.scheme
        learner = scheme.learner.state_dict()
        # networks and target networks (torchrl keeps the targets in the loss module)
        assert any(k.startswith("target_") for k in learner["loss_module"])
        for key, value in state["learner"]["loss_module"].items():
            assert torch.equal(learner["loss_module"][key], value), key
        for (k, a), b in zip(
            learner["optimizer"]["state"].items(),
            state["learner"]["optimizer"]["state"].values(),
            strict=True,
        ):
            assert all(torch.equal(a[n], b[n]) for n in a), k
        assert learner["version"] == state["learner"]["version"] > 0
        assert learner["target_updater"] == state["learner"]["target_updater"]
        eps = learner["exploration"][0]["eps"]
        assert torch.equal(eps, state["learner"]["exploration"][0]["eps"]) and eps < 1.0
        assert (scheme.frames, scheme.iterations) == (state["frames"], state["iterations"])
        assert scheme.loop.updates == state["replay"]["updates"] == (step - 128) // 4
        # the buffer: what the checkpoint's directory holds, frame for frame
        dumped = preset.storage_factory()()
        try:
            dumped.loads(str(manager.directory / saved["replay_buffer"]))
            held = len(dumped)
            assert len(scheme.replay_buffer) == held
            # driver-held: exactly the frames trained on; Ray-held: those and the writes
            # that ran ahead of them (trained on after the resume)
            assert held == step if location == "driver" else held >= step
            assert held == step + scheme.loop.frames_pending
            assert torch.equal(scheme.replay_buffer[:]["observation"], dumped[:]["observation"])
        finally:
            if location == "ray":
                dumped.shutdown()
        summary = trainer.run()
    assert summary["frames"] == step + 128
    assert (
        sorted(p.name for p in manager.directory.iterdir() if p.name.startswith("replay_"))[-1]
        == f"replay_{step + 128:012d}"
    )


@pytest.mark.timeout(300)
def test_the_buffer_actor_killed_mid_run_ends_the_command_in_two_lines_with_its_resume(
    ray_clean, tmp_path
):
    """A run whose Ray-held buffer dies ends with the error and how to resume, not a traceback."""
    from ray._private.state import state  # the GCS actor table (no dashboard in tests)

    run_dir = tmp_path / "run"
    proc = checkpointing_run(ray_clean, run_dir, "td3-pendulum", "ray")
    manager = CheckpointManager(run_dir / "checkpoints")
    try:
        wait_for_checkpoint(proc, manager, timeout_s=200)
        (pid,) = [
            info["Pid"]
            for info in state.actor_table(None).values()
            if info["ActorClassName"] == "OneLineReprReplayBuffer" and info["State"] == "ALIVE"
        ]
        os.kill(pid, signal.SIGKILL)  # as a user (or the OOM killer) would
    except BaseException:
        proc.kill()
        raise
    finally:
        code = proc.wait(timeout=120)
        printed = proc.stderr.read()
        proc.stderr.close()
    assert code == 1, printed
    assert "Traceback (most recent call last)" not in printed, printed
    # the two lines, together (Ray may relay the killed actor's last output around them)
    lines = printed.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("tdscheme train: error:")]
    error, stopped = lines[at : at + 2]
    assert error.startswith("tdscheme train: error: ReplayBufferDied: the replay buffer's actor")
    assert f"resume with: tdscheme train --resume {run_dir}" in stopped, stopped
    assert str(manager.latest()) in stopped


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dqn_cartpole_through_the_cli_beats_random(ray_clean, tmp_path):
    """A random CartPole policy returns about 22; a few thousand updates clearly beat it."""
    run_dir = tmp_path / "run"
    settings = {"total_frames": 12_000, "eval_every_frames": 2_048, "eval_episodes": 5,
                "target_return": 150.0, "progress": False}  # fmt: skip
    assert main(["train", "dqn-cartpole", *cli_options(settings), "--run-dir", str(run_dir)]) == 0
    returns = [value for _, value in read_metrics(run_dir)["eval/return"]]
    assert max(returns) >= 100, returns


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "command", [["dqn-cartpole", "--prioritized"], ["apex-dqn-cartpole"]], ids=["per", "apex"]
)
def test_prioritized_presets_reach_475_through_the_cli(ray_clean, tmp_path, command):
    """Issue 67 asks these two in CI: prioritized replay (tdscheme's sum tree here) and Ape-X's
    sharded replay reach CartPole's 475 through the command, as shipped."""
    run_dir = tmp_path / "run"
    assert main(["train", *command, "--progress", "False", "--run-dir", str(run_dir)]) == 0
    returns = [value for _, value in read_metrics(run_dir)["eval/return"]]
    assert max(returns) >= 475, returns


def sum_tree_leaves(buffer, frames: int):
    """The sampler's sum-tree leaves of ``frames`` frames: in this process, or in the buffer's actor."""
    import numpy as np
    import ray

    def leaves(rb):
        return np.asarray(rb.sampler._sum_tree[np.arange(frames)], dtype=np.float64)

    held = getattr(buffer, "buffer", None)  # a BoundedRayBuffer around torchrl's RayReplayBuffer
    if held is None:
        return leaves(buffer)
    return ray.get(held._rb.__ray_call__.remote(leaves), timeout=60)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("location", ["driver", "ray"])
def test_prioritized_replay_writes_priorities_checkpoints_and_resumes(ray_clean, tmp_path, location):
    """``prioritized=True`` trains (the loss's td_error written back), and a resume restores the tree.

    torchrl's extension does not load with the pinned torch: tdscheme's sum tree samples.
    """
    import numpy as np

    settings = {**TINY, "run_dir": str(tmp_path), "prioritized": True, "buffer_location": location,
                "checkpoint_every_frames": 256, "checkpoint_replay_buffer": True}  # fmt: skip
    preset = get_preset("dqn-cartpole").override(settings)
    with preset.build_trainer() as trainer:
        assert trainer.scheme.loop.prioritized
        summary = trainer.run()
        leaves = sum_tree_leaves(trainer.scheme.replay_buffer, 384)
    assert summary["frames"] == 384
    # every frame held has a priority; those the learner sampled hold their td_error's
    assert (leaves > 0).all() and np.unique(leaves).size > 32, leaves
    metrics = read_metrics(tmp_path)
    assert all(math.isfinite(v) for _, v in metrics["learner/loss"])
    resumed = preset.override({"resume": True, "total_frames": 512})
    with resumed.build_trainer() as trainer:
        np.testing.assert_allclose(sum_tree_leaves(trainer.scheme.replay_buffer, 384), leaves)
        assert trainer.run()["frames"] == 512


@pytest.mark.timeout(300)
def test_apex_dqn_cartpole_writes_worker_priorities_into_its_shards(ray_clean, tmp_path):
    """Ape-X's replay: two shards, each worker's frames into its own with its own TD errors."""
    import numpy as np
    import ray

    preset = get_preset("apex-dqn-cartpole").override(
        {**TINY, "num_collectors": 2, "collector_resources": {"num_cpus": 0.5},
         "run_dir": str(tmp_path)}  # fmt: skip
    )
    assert preset.scheme.buffer_location == "ray"
    with preset.build_trainer() as trainer:
        buffer = trainer.scheme.replay_buffer
        assert type(buffer).__name__ == "ShardedReplayBuffer" and trainer.scheme.loop.prioritized
        summary = trainer.run()
        stats = buffer.stats()
        # each worker runs its own epsilon (0.4 ** (1 + 7 i)), through the learner's pushes
        assert trainer.scheme.collector.policy_version > 0
        epsilons = [
            float(ray.get(actor.__ray_call__.remote(lambda w: w._collector.policy[1].eps), timeout=60))
            for actor in trainer.scheme.collector.remote_collectors
        ]
        np.testing.assert_allclose(epsilons, [0.4, 0.4**8], rtol=1e-5)
    assert summary["frames"] == 384 and sum(stats["writes_per_shard"]) >= 384
    assert min(stats["writes_per_shard"]) > 0 and stats["priority_updates"] > 0
    with pytest.raises(ValueError, match="replay_shards"):
        get_preset("apex-dqn-cartpole").override({"buffer_location": "driver"})
