"""Fault rows of issue 12, section 3: bad numbers, bad configuration, checkpoints, signals, the command.

Each row is a function returning the dict ``benchmarks/faults.py`` records; the runner
runs each in a fresh process with its own ``RAY_TMPDIR``. Heavy imports stay inside the
functions. Rows that need Ray start a small local one (2 CPUs) in their own process.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import row

TIMEOUT_S = 300.0
TDSCHEME = [sys.executable, "-m", "tdscheme.cli"]
SMALL_RUN = [
    "--num-collectors", "1", "--num-envs", "4", "--frames-per-batch", "256",
    "--minibatch-size", "128", "--num-epochs", "1", "--eval-every-frames", "0",
    "--checkpoint-every-frames", "0", "--collector-resources", '{"num_cpus": 0.5}',
    "--progress", "false",
]  # fmt: skip


def _expect_error(
    fault: str,
    build: Callable[[], Any],
    *,
    names: tuple[str, ...],
    bound_s: float = 2.0,
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError),
) -> dict[str, Any]:
    """A row for a call that must raise one of ``errors`` naming every word in ``names``."""
    start = time.perf_counter()
    try:
        build()
    except errors as err:
        seconds = time.perf_counter() - start
        message = str(err)
        missing = [name for name in names if name not in message]
        outcome = "wrong result" if missing else "clean error"
        detail = f"{type(err).__name__}: {message}" + (
            f" (does not name {missing})" if missing else ""
        )
        return row(fault, outcome, seconds, bound_s, detail=detail)
    except BaseException as err:  # noqa: BLE001 - another error is a confusing one
        return row(fault, "wrong result", time.perf_counter() - start, bound_s,
                   detail=f"{type(err).__name__}: {err}")  # fmt: skip
    return row(fault, "wrong result", time.perf_counter() - start, bound_s, detail="no error")


def _ray() -> None:
    from tdscheme.runtime import RayLease

    RayLease.acquire({"num_cpus": 2, "log_to_driver": False})


# -- non-finite numbers ---------------------------------------------------------------


def _scheme(env_kwargs: dict[str, Any], **learner_config: Any) -> Any:
    from fault_rows._parts import cartpole_preset
    from tdscheme import Scheme, SchemeConfig
    from tdscheme.envs import make_faulty_env

    preset = cartpole_preset()

    def learner_fn(**modules: Any) -> Any:
        from tdscheme.learner import Learner, LearnerConfig

        built = preset.learner_factory()(**modules)
        return Learner(built.loss_module, config=LearnerConfig(**learner_config),
                       value_estimator=built.value_estimator)  # fmt: skip

    config = SchemeConfig(num_collectors=1, frames_per_batch=64, seed=0,
                          collector_resources={"num_cpus": 0.5})  # fmt: skip
    return Scheme(
        env_factory=functools.partial(make_faulty_env, "CartPole-v1", **env_kwargs),
        policy_factory=preset.policy_factory(), learner_factory=learner_fn, config=config,
    )  # fmt: skip


def _nonfinite_run(fault: str, value: float, where: str) -> dict[str, Any]:
    from tdscheme.errors import NonFiniteUpdateError

    _ray()
    env = {"nonfinite_at_step": 100, "nonfinite_in": where, "nonfinite_value": value,
           "nonfinite_every": True}  # fmt: skip
    with _scheme(env) as scheme:
        scheme.step()  # frames 1-64 are finite
        pushes = scheme.collector.stats()["weight_pushes"]
        start = time.perf_counter()
        try:
            for _ in range(10):
                scheme.step()
        except NonFiniteUpdateError as err:
            seconds = time.perf_counter() - start
            pushed = scheme.collector.stats()["weight_pushes"] - pushes
            ok = f"'{where}'" in str(err) and "worker(s) [0]" in str(err) and pushed == 0
            return row(fault, "clean error" if ok else "wrong result", seconds, 120.0,
                       detail=f"{err} (weight pushes after it: {pushed})")  # fmt: skip
    return row(fault, "wrong result", time.perf_counter() - start, 120.0, detail="no error")


def nan_reward_run() -> dict[str, Any]:
    return _nonfinite_run(
        "reward=NaN from step 100: 3 updates skipped, stop", float("nan"), "reward"
    )


def inf_reward_run() -> dict[str, Any]:
    return _nonfinite_run(
        "reward=+inf from step 100: 3 updates skipped, stop", float("inf"), "reward"
    )


def nan_reward_dropped() -> dict[str, Any]:
    _ray()
    env = {"nonfinite_at_step": 30, "nonfinite_value": float("nan")}  # one bad frame
    with _scheme(env, drop_nonfinite_frames=True) as scheme:
        start = time.perf_counter()
        dropped = sum(scheme.step()["learner/nonfinite_frames_dropped"] for _ in range(3))
        finite = all(bool(v.isfinite().all()) for v in scheme.learner.weights().values(True, True))
        ok = dropped == 1 and finite and scheme.learner.version == 3
        return row("reward=NaN once, drop_nonfinite_frames=True", "survived" if ok else "wrong result",
                   time.perf_counter() - start, 60.0,
                   detail=f"{dropped:g} frame dropped and counted, 3 updates, weights finite={finite}")  # fmt: skip


def nan_observation_run() -> dict[str, Any]:
    from tdscheme.errors import WorkerError

    _ray()
    env = {"nonfinite_at_step": 100, "nonfinite_in": "observation", "nonfinite_every": True}
    start = time.perf_counter()
    try:
        with _scheme(env) as scheme:
            for _ in range(20):
                scheme.step()
    except WorkerError as err:
        text = str(err)
        ok = "'observation'" in text and "from worker 0" in text and "first at step 101" in text
        return row("observation=NaN from step 100 (the policy fails in the worker)",
                   "clean error" if ok else "wrong result", time.perf_counter() - start, 120.0,
                   detail=text.splitlines()[0])  # fmt: skip
    return row(
        "observation=NaN", "wrong result", time.perf_counter() - start, 120.0, detail="no error"
    )


def nan_loss() -> dict[str, Any]:
    import torch

    from fault_rows._parts import cartpole_preset
    from tdscheme.envs import make_env

    preset = cartpole_preset()
    modules = preset.policy_factory()()
    learner = preset.learner_factory()(**modules)
    env = make_env("CartPole-v1")
    with torch.no_grad():
        batch = env.rollout(64, modules["actor"], break_when_any_done=False)
    batch["action_log_prob"] = torch.full_like(batch["action_log_prob"], float("nan"))
    before = learner.weights()
    start = time.perf_counter()
    metrics = learner.update(batch)
    same = bool((learner.weights() == before).all())
    ok = metrics["nonfinite_skipped"] == 1 and same and learner.version == 0
    return row("a loss that returns NaN", "survived" if ok else "wrong result",
               time.perf_counter() - start, 5.0,
               detail=f"update skipped and counted, weights unchanged={same}, version {learner.version}")  # fmt: skip


def nan_gradients() -> dict[str, Any]:
    import torch

    from fault_rows._parts import cartpole_preset
    from tdscheme.envs import make_env

    preset = cartpole_preset()
    modules = preset.policy_factory()()
    learner = preset.learner_factory()(**modules)
    env = make_env("CartPole-v1")
    with torch.no_grad():
        batch = env.rollout(64, modules["actor"], break_when_any_done=False)
    grads, _ = learner.compute_gradients(batch)
    key = next(iter(grads.keys(True, True)))
    grads[key] = torch.full_like(grads[key], float("inf"))
    before = learner.weights()
    start = time.perf_counter()
    metrics = learner.apply_gradients(grads)
    same = bool((learner.weights() == before).all())
    ok = metrics["nonfinite_skipped"] == 1 and same
    return row("inf gradients given to apply_gradients", "survived" if ok else "wrong result",
               time.perf_counter() - start, 5.0, detail=f"step skipped, weights unchanged={same}")  # fmt: skip


def nan_weight_push() -> dict[str, Any]:
    import torch

    from fault_rows._parts import linear_policy
    from tdscheme import RayCollector
    from tdscheme.envs import make_env

    _ray()
    policy = linear_policy(3, 1)
    with RayCollector(functools.partial(make_env, "Pendulum-v1"), policy, frames_per_batch=50,
                      total_frames=-1, remote_configs={"num_cpus": 0.5}) as collector:  # fmt: skip
        weights = {k: v.clone() for k, v in policy.state_dict().items()}
        weights["module.bias"] = torch.tensor([float("nan")])
        result = _expect_error(
            "update_policy_weights_ with NaN weights",
            lambda: collector.update_policy_weights_(weights), names=("non-finite", "nothing was pushed"),
        )  # fmt: skip
        result["detail"] += f"; policy version still {collector.policy_version}"
        return result


# -- configuration --------------------------------------------------------------------


def _config_row(fault: str, build_name: str, kwargs: dict[str, Any], names: tuple[str, ...]):
    def fn() -> dict[str, Any]:
        import tdscheme
        from tdscheme.engine import TrainerConfig
        from tdscheme.learner import LearnerConfig
        from tdscheme.presets import ActorCriticConfig

        classes = {"SchemeConfig": tdscheme.SchemeConfig, "LearnerConfig": LearnerConfig,
                   "TrainerConfig": TrainerConfig, "ActorCriticConfig": ActorCriticConfig,
                   "RayCollectorConfig": tdscheme.RayCollectorConfig}  # fmt: skip
        cls = classes[build_name]
        if build_name == "RayCollectorConfig":
            from fault_rows._parts import linear_policy
            from tdscheme.envs import make_faulty_env

            kwargs.update(create_env_fn=make_faulty_env, policy=linear_policy(3, 1),
                          frames_per_batch=10)  # fmt: skip
        return _expect_error(fault, lambda: cls(**kwargs), names=names)

    return fn


def policy_in_keys_mismatch() -> dict[str, Any]:
    from fault_rows._parts import linear_policy
    from tdscheme import RayCollector
    from tdscheme.envs import make_env
    from tdscheme.errors import WorkerError

    _ray()

    def build() -> None:
        with RayCollector(functools.partial(make_env, "Pendulum-v1"), linear_policy(3, 1, obs_key="obs"),
                          frames_per_batch=50, total_frames=100,
                          remote_configs={"num_cpus": 0.5}) as collector:  # fmt: skip
            next(iter(collector))

    return _expect_error("policy in_keys the env does not provide", build,
                         names=("'obs'", "missing", "observation", "worker 0"), bound_s=60.0,
                         errors=(WorkerError, ValueError))  # fmt: skip


def policy_out_keys_mismatch() -> dict[str, Any]:
    import torch
    from tensordict.nn import TensorDictModule

    from tdscheme import RayCollector
    from tdscheme.envs import make_env
    from tdscheme.errors import WorkerError

    _ray()
    policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["act"])

    def build() -> None:
        with RayCollector(functools.partial(make_env, "Pendulum-v1"), policy, frames_per_batch=50,
                          total_frames=100, remote_configs={"num_cpus": 0.5}) as collector:  # fmt: skip
            next(iter(collector))

    return _expect_error("policy out_keys miss the env's action", build,
                         names=("'act'", "'action'", "worker 0"), bound_s=60.0,
                         errors=(WorkerError, ValueError))  # fmt: skip


# -- checkpoints ----------------------------------------------------------------------


def _two_checkpoints(directory: Path) -> tuple[Any, Path, Path]:
    import torch

    from tdscheme.engine import CheckpointManager

    manager = CheckpointManager(directory)
    old = manager.save({"w": torch.ones(2)}, 10)
    new = manager.save({"w": torch.full((2,), 2.0)}, 20)
    return manager, old, new


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else b"\x00" * len(data))


def checkpoint_by_name(how: str) -> Callable[[], dict[str, Any]]:
    def fn() -> dict[str, Any]:
        from tdscheme.engine.checkpoint import load_checkpoint
        from tdscheme.errors import CheckpointError

        with tempfile.TemporaryDirectory() as d:
            _, _, new = _two_checkpoints(Path(d))
            _damage(new, how)
            return _expect_error(f"{how} newest checkpoint, loaded by name",
                                 lambda: load_checkpoint(new), names=(str(new),),
                                 errors=(CheckpointError,))  # fmt: skip

    return fn


def checkpoint_fallback(how: str) -> Callable[[], dict[str, Any]]:
    def fn() -> dict[str, Any]:
        import logging

        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("tdscheme").addHandler(handler)
        with tempfile.TemporaryDirectory() as d:
            manager, _, new = _two_checkpoints(Path(d))
            _damage(new, how)
            start = time.perf_counter()
            state = manager.load()
            warned = any(str(new) in r for r in records)
            ok = float(state["w"][0]) == 1.0 and warned
            return row(f"{how} newest checkpoint: load (resume) falls back",
                       "survived" if ok else "wrong result", time.perf_counter() - start, 2.0,
                       detail=f"previous checkpoint loaded, warning naming the file={warned}")  # fmt: skip

    return fn


def checkpoint_all_damaged() -> dict[str, Any]:
    from tdscheme.errors import CheckpointError

    with tempfile.TemporaryDirectory() as d:
        manager, old, new = _two_checkpoints(Path(d))
        _damage(old, "truncated")
        _damage(new, "garbage")
        return _expect_error("every checkpoint damaged", manager.load,
                             names=(str(old), str(new), "every checkpoint"),
                             errors=(CheckpointError,))  # fmt: skip


def checkpoint_crash_during_save() -> dict[str, Any]:
    from tdscheme.engine import CheckpointManager

    with tempfile.TemporaryDirectory() as d:
        _, old, new = _two_checkpoints(Path(d))
        script = (
            "import os, torch, tdscheme.engine.checkpoint as c\n"
            "def dying(obj, f):\n    f.write(b'x' * 4096); f.flush(); os._exit(9)\n"
            "c.torch.save = dying\n"
            f"c.CheckpointManager({d!r}).save({{'w': torch.zeros(2)}}, 30)\n"
        )
        code = subprocess.run([sys.executable, "-c", script], timeout=120).returncode
        leftovers = [p.name for p in Path(d).iterdir() if p.name.endswith(".tmp")]
        start = time.perf_counter()  # the recovery: the next start of the run's manager
        manager = CheckpointManager(d)  # removes the dead save's temporary file
        state = manager.load()
        ok = (code == 9 and float(state["w"][0]) == 2.0 and leftovers
              and not [p for p in Path(d).iterdir() if p.name.endswith(".tmp")]
              and [p.name for p in manager.list()] == [old.name, new.name])  # fmt: skip
        return row("process killed in the middle of a checkpoint save",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 30.0,
                   detail=f"previous checkpoints intact, the dead save's {leftovers} removed at start")  # fmt: skip


# -- the command ----------------------------------------------------------------------


def _command(fault: str, args: list[str], *, expect: tuple[str, ...], code: int = 2,
             bound_s: float = 2.0, cwd: str | None = None) -> dict[str, Any]:  # fmt: skip
    ray_tmp = tempfile.mkdtemp(prefix="r", dir=os.environ.get("TMPDIR"))
    env = dict(os.environ, RAY_TMPDIR=ray_tmp)
    start = time.perf_counter()
    result = subprocess.run([*TDSCHEME, *args], capture_output=True, text=True, timeout=240,
                            env=env, cwd=cwd)  # fmt: skip
    seconds = time.perf_counter() - start
    err = result.stderr
    errors = [line for line in err.splitlines() if "error:" in line]
    missing = [e for e in expect if e not in err]
    ray_started = bool(os.listdir(ray_tmp))
    ok = result.returncode == code and not missing and "Traceback" not in err and len(errors) <= 1
    detail = (errors[0] if errors else err.strip().splitlines()[-1] if err.strip() else "")[:300]
    detail += f" (exit {result.returncode}; Ray started: {ray_started}" + (
        f"; missing {missing})" if missing else ")"
    )
    return row(fault, "clean error" if ok else "wrong result", seconds, bound_s, detail=detail)


def cli_env_id() -> dict[str, Any]:
    return _command("tdscheme train --env-id Cartpole-v1 (typo)", ["train", "--env-id", "Cartpole-v1"],
                    expect=("argument --env-id", "did you mean 'CartPole-v1'"))  # fmt: skip


def cli_ray_key() -> dict[str, Any]:
    return _command("tdscheme train --ray-init-config with an unknown key",
                    ["train", "--ray-init-config", '{"num_cpu": 2}'],
                    expect=("argument --ray-init-config", "'num_cpu'"))  # fmt: skip


def cli_bad_value() -> dict[str, Any]:
    return _command("tdscheme train --num-collectors 0", ["train", "--num-collectors", "0"],
                    expect=("argument --num-collectors: num_collectors=0 is invalid",), bound_s=30.0)  # fmt: skip


def cli_bad_resources() -> dict[str, Any]:
    return _command("tdscheme train --collector-resources '{\"num_cpu\": 1}'",
                    ["train", "--collector-resources", '{"num_cpu": 1}'],
                    expect=("argument --collector-resources", "num_cpu"), bound_s=30.0)  # fmt: skip


def _saved_run(run_dir: Path) -> Path:
    from tdscheme.engine import CheckpointManager
    from tdscheme.presets import get_preset

    preset = get_preset("ppo-cartpole").override({"num_collectors": 1, "eval_num_envs": 1})
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(preset.to_dict()))
    learner = preset.learner_factory()(**preset.policy_factory()())
    manager = CheckpointManager(run_dir / "checkpoints")
    for frames in (512, 1024):
        manager.save({"scheme": {"learner": learner.state_dict(), "frames": frames},
                      "config": preset.to_dict()}, frames)  # fmt: skip
    return run_dir


def cli_resume_changed() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        return _command("tdscheme train --resume with changed --hidden-sizes and --env-id",
                        ["train", "--resume", str(run_dir), "--hidden-sizes", "32,32", "--env-id",
                         "Acrobot-v1"],
                        expect=("argument --hidden-sizes: hidden_sizes=(32, 32) differs",
                                "argument --env-id: env_id='Acrobot-v1' differs"), bound_s=30.0)  # fmt: skip


def cli_resume_collectors() -> dict[str, Any]:
    from tdscheme.cli.parser import build_parser, train_preset

    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        args = build_parser().parse_args(
            ["train", "--resume", str(run_dir), "--num-collectors", "3"]
        )
        start = time.perf_counter()
        preset = train_preset(args)
        ok = preset.scheme.num_collectors == 1
        return row("tdscheme train --resume with a changed --num-collectors",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 2.0,
                   detail="the run's num_collectors=1 adopted, with a note")  # fmt: skip


def cli_resume_not_a_run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        return _command("tdscheme train --resume of a directory that is not a run",
                        ["train", "--resume", d], expect=("has no config.json",), bound_s=30.0)  # fmt: skip


def cli_eval_fallback() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        newest = run_dir / "checkpoints" / "ckpt_000000001024.pt"
        _damage(newest, "truncated")
        start = time.perf_counter()
        result = subprocess.run([*TDSCHEME, "eval", str(run_dir), "--episodes", "1"],
                                capture_output=True, text=True, timeout=240)  # fmt: skip
        ok = (result.returncode == 0 and "at 512 frames" in result.stdout
              and str(newest) in result.stderr and "Traceback" not in result.stderr)  # fmt: skip
        warning = next((line for line in result.stderr.splitlines() if "skipping" in line), "")
        return row("tdscheme eval RUN_DIR with a truncated newest checkpoint",
                   "survived" if ok else "wrong result", time.perf_counter() - start, 60.0,
                   detail=f"evaluated the previous one; {warning.strip()[:200]}")  # fmt: skip


def cli_eval_damaged_file() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        run_dir = _saved_run(Path(d) / "run")
        newest = run_dir / "checkpoints" / "ckpt_000000001024.pt"
        _damage(newest, "garbage")
        return _command("tdscheme eval of a damaged checkpoint file", ["eval", str(newest)],
                        expect=(str(newest), "corrupt"), code=1, bound_s=30.0)  # fmt: skip


# -- signals --------------------------------------------------------------------------


def _ray_processes(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline and state != "Z":
                found.append(entry.name)
    return found


def _signal_row(fault: str, sig: int, *, when: str, twice: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    ray_tmp = work / "ray"
    ray_tmp.mkdir()
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
    run_dir = work / "run"
    proc = subprocess.Popen(
        [*TDSCHEME, "train", "--run-dir", str(run_dir), "--total-frames", "100000000", *SMALL_RUN],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    if when == "training":
        metrics = run_dir / "metrics.csv"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.is_file() and len(metrics.read_text().splitlines()) > 2:
                break
            time.sleep(0.25)
    else:  # while Ray starts: its session directory appears
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and not any(ray_tmp.rglob("session_*"))
        ):
            time.sleep(0.05)
    start = time.perf_counter()
    proc.send_signal(sig)
    if twice:
        time.sleep(0.5)
        proc.send_signal(sig)
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return row(fault, "hang", time.perf_counter() - start, 60.0, detail="no exit within 120 s")
    seconds = time.perf_counter() - start
    time.sleep(2.0)
    left = _ray_processes(str(ray_tmp))
    expected = 128 + sig
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt_*.pt")) if run_dir.exists() else []
    lines = [line for line in output.splitlines() if line.startswith("tdscheme")]
    stop_line = next((line for line in lines if signal.Signals(sig).name in line), "")
    ok = proc.returncode == expected and not left and "Traceback" not in output and stop_line
    if when == "training" and not twice:
        ok = ok and bool(checkpoints) and "stopped cleanly" in stop_line
    detail = (f"exit {proc.returncode} (expected {expected}); Ray processes left: {len(left)}; "
              f"checkpoints: {[c.name for c in checkpoints]}; line: {stop_line[:160]}")  # fmt: skip
    return row(fault, "clean error" if ok else "wrong result", seconds, 60.0, detail=detail)


def sigterm_training() -> dict[str, Any]:
    return _signal_row(
        "SIGTERM while training (a scheduler's preemption)", signal.SIGTERM, when="training"
    )


def sigint_training() -> dict[str, Any]:
    return _signal_row("Ctrl-C (SIGINT) while training", signal.SIGINT, when="training")


def sigint_twice() -> dict[str, Any]:
    return _signal_row(
        "Ctrl-C twice while training (forced)", signal.SIGINT, when="training", twice=True
    )


def sigterm_ray_start() -> dict[str, Any]:
    return _signal_row("SIGTERM while Ray starts", signal.SIGTERM, when="ray")


# -- a user's loss, a user's Ray --------------------------------------------------------


class _BrokenLoss(Exception):
    pass


def _raising_learner(**modules: Any) -> Any:
    from fault_rows._parts import cartpole_preset

    learner = cartpole_preset().learner_factory()(**modules)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise _BrokenLoss("the user's loss failed at line 42")

    learner.loss_module.forward = broken
    return learner


def user_loss_raises() -> dict[str, Any]:
    import traceback

    import ray

    from fault_rows._parts import alive_actor_ids, cartpole_preset
    from tdscheme import Scheme, SchemeConfig
    from tdscheme.envs import make_env

    _ray()
    config = SchemeConfig(
        num_collectors=2, frames_per_batch=64, collector_resources={"num_cpus": 0.5}
    )
    start = time.perf_counter()
    try:
        with Scheme(env_factory=functools.partial(make_env, "CartPole-v1"),
                    policy_factory=cartpole_preset().policy_factory(),
                    learner_factory=_raising_learner, config=config) as scheme:  # fmt: skip
            scheme.step()
    except _BrokenLoss as err:
        tb = "".join(traceback.format_exception(err))
        deadline = time.monotonic() + 30
        while alive_actor_ids() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = len(alive_actor_ids())
        ok = "line 42" in tb and "broken" in tb and left == 0 and ray.is_initialized()
        return row("an exception in the user's loss", "clean error" if ok else "wrong result",
                   time.perf_counter() - start, 60.0,
                   detail=f"the original exception and traceback; actors left: {left}")  # fmt: skip
    return row("an exception in the user's loss", "wrong result", time.perf_counter() - start, 60.0)


def users_ray_kept() -> dict[str, Any]:
    import ray

    from fault_rows._parts import cartpole_preset
    from tdscheme import Scheme, SchemeConfig
    from tdscheme.envs import make_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # the user's own
    preset = cartpole_preset()
    start = time.perf_counter()
    config = SchemeConfig(
        num_collectors=1, frames_per_batch=64, collector_resources={"num_cpus": 0.5}
    )
    with Scheme(env_factory=functools.partial(make_env, "CartPole-v1"),
                policy_factory=preset.policy_factory(), learner_factory=preset.learner_factory(),
                config=config) as scheme:  # fmt: skip
        scheme.step()
    alive = ray.is_initialized() and ray.get(ray.put(1)) == 1
    return row("a user's own Ray after the scheme shuts down", "survived" if alive else "wrong result",
               time.perf_counter() - start, 120.0, detail=f"the user's Ray still up: {alive}")  # fmt: skip


ROWS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("nan: reward NaN in a run", nan_reward_run),
    ("nan: reward +inf in a run", inf_reward_run),
    ("nan: reward NaN dropped (option)", nan_reward_dropped),
    ("nan: observation NaN in a worker", nan_observation_run),
    ("nan: loss NaN", nan_loss),
    ("nan: gradients inf", nan_gradients),
    ("nan: weight push with NaN", nan_weight_push),
    ("config: SchemeConfig num_collectors=0", _config_row("SchemeConfig(num_collectors=0)", "SchemeConfig", {"num_collectors": 0}, ("num_collectors=0",))),
    ("config: SchemeConfig sync='yes'", _config_row("SchemeConfig(sync='yes')", "SchemeConfig", {"sync": "yes"}, ("sync='yes'",))),
    ("config: SchemeConfig collector_resources num_cpu", _config_row("SchemeConfig(collector_resources={'num_cpu': 1})", "SchemeConfig", {"collector_resources": {"num_cpu": 1}}, ("collector_resources", "num_cpu"))),
    ("config: SchemeConfig ray_init_config key", _config_row("SchemeConfig(ray_init_config={'num_cpu': 2})", "SchemeConfig", {"ray_init_config": {"num_cpu": 2}}, ("ray_init_config['num_cpu']",))),
    ("config: SchemeConfig sync frames % collectors", _config_row("SchemeConfig(num_collectors=3, frames_per_batch=100, sync=True)", "SchemeConfig", {"num_collectors": 3, "frames_per_batch": 100, "sync": True}, ("frames_per_batch=100", "num_collectors"))),
    ("config: RayCollectorConfig remote_configs num_cpus=-1", _config_row("RayCollectorConfig(remote_configs={'num_cpus': -1})", "RayCollectorConfig", {"remote_configs": {"num_cpus": -1}}, ("remote_configs", "negative"))),
    ("config: RayCollectorConfig split_trajs='yes'", _config_row("RayCollectorConfig(split_trajs='yes')", "RayCollectorConfig", {"split_trajs": "yes"}, ("split_trajs='yes'",))),
    ("config: RayCollectorConfig seed=1.5", _config_row("RayCollectorConfig(seed=1.5)", "RayCollectorConfig", {"seed": 1.5}, ("seed=1.5",))),
    ("config: LearnerConfig max_nonfinite_updates=0", _config_row("LearnerConfig(max_nonfinite_updates=0)", "LearnerConfig", {"max_nonfinite_updates": 0}, ("max_nonfinite_updates=0",))),
    ("config: TrainerConfig target_return=nan", _config_row("TrainerConfig(target_return=nan)", "TrainerConfig", {"target_return": float("nan")}, ("target_return=nan",))),
    ("config: ActorCriticConfig env_id typo", _config_row("ActorCriticConfig(env_id='CartPole-v9')", "ActorCriticConfig", {"env_id": "CartPole-v9"}, ("env_id='CartPole-v9'", "CartPole-v1"))),
    ("config: policy in_keys", policy_in_keys_mismatch),
    ("config: policy out_keys", policy_out_keys_mismatch),
    ("checkpoint: truncated, by name", checkpoint_by_name("truncated")),
    ("checkpoint: garbage, by name", checkpoint_by_name("garbage")),
    ("checkpoint: truncated newest, fallback", checkpoint_fallback("truncated")),
    ("checkpoint: garbage newest, fallback", checkpoint_fallback("garbage")),
    ("checkpoint: all damaged", checkpoint_all_damaged),
    ("checkpoint: crash during save", checkpoint_crash_during_save),
    ("cli: --env-id typo", cli_env_id),
    ("cli: --ray-init-config unknown key", cli_ray_key),
    ("cli: --num-collectors 0", cli_bad_value),
    ("cli: --collector-resources unknown key", cli_bad_resources),
    ("cli: --resume changed shapes", cli_resume_changed),
    ("cli: --resume changed collectors", cli_resume_collectors),
    ("cli: --resume not a run", cli_resume_not_a_run),
    ("cli: eval falls back", cli_eval_fallback),
    ("cli: eval damaged file", cli_eval_damaged_file),
    ("signal: SIGTERM while training", sigterm_training),
    ("signal: SIGINT while training", sigint_training),
    ("signal: SIGINT twice", sigint_twice),
    ("signal: SIGTERM while Ray starts", sigterm_ray_start),
    ("user: loss raises", user_loss_raises),
    ("user: own Ray kept", users_ray_kept),
]  # fmt: skip
