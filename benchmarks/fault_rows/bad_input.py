"""Fault rows of issue 12, section 3: bad numbers, bad configuration, a user's failing code.

Each row is a function returning the dict ``benchmarks/faults.py`` records; the runner
runs each in a fresh process with its own ``RAY_TMPDIR``. Heavy imports stay inside the
functions. Rows that need Ray start a small local one (2 CPUs) in their own process.
The damaged checkpoints are ``checkpoints.py``'s rows, the command's mistakes and
signals ``command.py``'s.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from faults import row
from harness import wait_until

from fault_rows._parts import alive_actor_ids, cartpole_preset, expect_error, linear_policy

TIMEOUT_S = 300.0


def _ray() -> None:
    from tdscheme.runtime import RayLease

    RayLease.acquire({"num_cpus": 2, "log_to_driver": False})


# -- non-finite numbers ---------------------------------------------------------------


def _scheme(env_kwargs: dict[str, Any], **learner_config: Any) -> Any:
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


def _learner_and_batch() -> tuple[Any, Any]:
    """The CartPole preset's learner and 64 frames its actor collected."""
    import torch

    from tdscheme.envs import make_env

    preset = cartpole_preset()
    modules = preset.policy_factory()()
    learner = preset.learner_factory()(**modules)
    env = make_env("CartPole-v1")
    with torch.no_grad():
        batch = env.rollout(64, modules["actor"], break_when_any_done=False)
    return learner, batch


def nan_loss() -> dict[str, Any]:
    import torch

    learner, batch = _learner_and_batch()
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

    learner, batch = _learner_and_batch()
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

    from tdscheme import RayCollector
    from tdscheme.envs import make_env

    _ray()
    policy = linear_policy(3, 1)
    with RayCollector(functools.partial(make_env, "Pendulum-v1"), policy, frames_per_batch=50,
                      total_frames=-1, remote_configs={"num_cpus": 0.5}) as collector:  # fmt: skip
        weights = {k: v.clone() for k, v in policy.state_dict().items()}
        weights["module.bias"] = torch.tensor([float("nan")])
        result = expect_error(
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
            from tdscheme.envs import make_faulty_env

            kwargs.update(create_env_fn=make_faulty_env, policy=linear_policy(3, 1),
                          frames_per_batch=10)  # fmt: skip
        return expect_error(fault, lambda: cls(**kwargs), names=names)

    return fn


def policy_in_keys_mismatch() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_env
    from tdscheme.errors import WorkerError

    _ray()

    def build() -> None:
        with RayCollector(functools.partial(make_env, "Pendulum-v1"), linear_policy(3, 1, obs_key="obs"),
                          frames_per_batch=50, total_frames=100,
                          remote_configs={"num_cpus": 0.5}) as collector:  # fmt: skip
            next(iter(collector))

    return expect_error("policy in_keys the env does not provide", build,
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

    return expect_error("policy out_keys miss the env's action", build,
                         names=("'act'", "'action'", "worker 0"), bound_s=60.0,
                         errors=(WorkerError, ValueError))  # fmt: skip


# -- a user's loss, a user's Ray --------------------------------------------------------


class _BrokenLoss(Exception):
    pass


def _raising_learner(**modules: Any) -> Any:

    learner = cartpole_preset().learner_factory()(**modules)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise _BrokenLoss("the user's loss failed at line 42")

    learner.loss_module.forward = broken
    return learner


def user_loss_raises() -> dict[str, Any]:
    import traceback

    import ray

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
        wait_until(lambda: not alive_actor_ids(), 30.0, poll_s=0.1)
        left = len(alive_actor_ids())
        ok = "line 42" in tb and "broken" in tb and left == 0 and ray.is_initialized()
        return row("an exception in the user's loss", "clean error" if ok else "wrong result",
                   time.perf_counter() - start, 60.0,
                   detail=f"the original exception and traceback; actors left: {left}")  # fmt: skip
    return row("an exception in the user's loss", "wrong result", time.perf_counter() - start, 60.0)


def users_ray_kept() -> dict[str, Any]:
    import ray

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
    ("user: loss raises", user_loss_raises),
    ("user: own Ray kept", users_ray_kept),
]  # fmt: skip
