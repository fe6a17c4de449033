"""``collection.py``'s frames/s sections: tdscheme's RayCollector against torchrl's and the limits.

* ``same``, ``batched``, ``envpool``: the same configuration for every collector
  (issue 13's ratios: the default 1-env case, 64 envs per worker, EnvPool);
* ``recommended``, ``limits``: tdscheme as recommended against torchrl's docstring
  setup, then the hand-written and single-process limits (issue 2);
* ``scale``: 2 to 14 collectors (16 cores).

What each measures is in ``collection.py``'s docstring.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import layout_worker  # benchmarks/layout_worker.py, likewise
import peers  # benchmarks/peers.py, next to this script (Ray workers see this directory too)
import torch
from collection_runs import (
    ENVS,
    RAY_COLLECTORS,
    TOTAL_FRAMES,
    Measurement,
    Settings,
    log,
    measure,
    tdscheme_collector,
    tdscheme_torchrl_class,
    torchrl_collector,
)
from harness import turn_order
from peers import mlp_policy
from report import Recorder

from tdscheme.envs import make_env

ORDER = {False: "first-ready", True: "stacked"}
SAME_IMPLS = {**RAY_COLLECTORS, "tdscheme Collector": tdscheme_torchrl_class}


def section_same(rec: Recorder, s: Settings) -> None:
    config = "1 env/collector, 2 collectors, fpb=1000"
    for i, (env_id, sync) in enumerate(s.same_matrix):
        obs_dim, action_dim, discrete = ENVS[env_id]
        impls = list(SAME_IMPLS.items())
        for impl, factory in turn_order(impls, i):
            torch.manual_seed(0)
            policy = mlp_policy(obs_dim, action_dim, discrete=discrete)
            make = functools.partial(
                factory,
                functools.partial(make_env, env_id),
                policy,
                frames_per_batch=1000,
                sync=sync,
            )
            row = dict(section="same", impl=impl, env=env_id, order=ORDER[sync], config=config)
            measure(rec, s, row, make)


def section_batched(
    rec: Recorder,
    s: Settings,
    *,
    section: str = "batched",
    env_fn: Callable | None = None,
    hand_mode: str = "SAME_STEP",
    hand_kwargs: dict[str, Any] | None = None,
    extra: dict[str, Callable] | None = None,
) -> None:
    """64 envs per worker, 2 workers: tdscheme, torchrl and the hand-written Ray collector.

    ``env_fn`` is what tdscheme's and torchrl's workers step (default ``make_env``'s 64
    CartPole envs, auto-reset disabled); ``benchmarks/fast_paths.py`` passes others,
    recorded under its own ``section`` names, and the hand-written workers' autoreset
    mode (``hand_mode``: ``peers.MinimalCollectorWorker``'s ``autoreset_mode``; ``hand_kwargs``:
    its other arguments). The row ``hand-written Ray, torchrl layout`` runs the same
    actors writing torchrl's layout of each batch by hand
    (``layout_worker.MinimalLayoutWorker``: next observations, one-hot actions, flags, no
    transition at reset steps), what any torchrl-layout collector owes beyond the numpy floor.
    ``extra``: more rows (impl -> a maker of a collector of ``fpb`` frames per batch),
    measured after tdscheme's.
    """
    env_id, num_envs, fpb = "CartPole-v1", 64, 4096
    config = f"{num_envs} envs/worker, 2 workers, fpb={fpb}"
    frames = max(3 * s.frames, s.min_batches * fpb)
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)
    env_fn = env_fn or functools.partial(make_env, env_id, num_envs=num_envs)
    makes = {
        "tdscheme": functools.partial(
            tdscheme_collector, env_fn, policy, frames_per_batch=fpb, sync=False
        ),
        **{impl: functools.partial(make, fpb) for impl, make in (extra or {}).items()},
        "hand-written Ray": functools.partial(
            peers.MinimalRayCollector,
            env_id,
            num_envs=num_envs,
            frames_per_batch=fpb,
            worker_kwargs={"autoreset_mode": hand_mode, **(hand_kwargs or {})},
        ),
        "hand-written Ray, torchrl layout": functools.partial(
            peers.MinimalRayCollector,
            env_id,
            num_envs=num_envs,
            frames_per_batch=fpb,
            worker_cls=layout_worker.MinimalLayoutWorker,
            worker_kwargs={"autoreset_mode": hand_mode, **(hand_kwargs or {})},
        ),
        "torchrl": functools.partial(
            torchrl_collector, env_fn, policy, frames_per_batch=fpb, sync=False
        ),
    }
    for impl, make in makes.items():
        row = dict(section=section, impl=impl, env=env_id, order="first-ready", config=config)
        measure(rec, s, row, make, frames=frames)


def gym_atari_env(env_id: str, num_envs: int) -> Any:
    """Atari through gymnasium + ale-py, preprocessed as EnvPool does, for tdscheme's lean path.

    ``num_envs`` copies of ``gym.make(env_id, frameskip=1, repeat_action_probability=0)``
    with ``AtariPreprocessing`` (4 frames skipped, 84x84 grayscale, up to 30 no-ops)
    and 4 stacked frames, in a ``SyncVectorEnv`` (auto-reset disabled) under torchrl's
    ``GymWrapper``. Needs ale-py and opencv (the ``clients`` extra).
    """
    import ale_py
    from torchrl.envs import GymWrapper

    gym.register_envs(ale_py)

    def one() -> Any:
        env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
        env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=30)
        return gym.wrappers.FrameStackObservation(env, 4)

    mode = gym.vector.AutoresetMode.DISABLED
    return GymWrapper(gym.vector.SyncVectorEnv([one] * num_envs, autoreset_mode=mode))


def section_envpool(rec: Recorder, s: Settings) -> None:
    """tdscheme over EnvPool envs (CartPole-v1, Pong-v5), the EnvPool limit, Pong via gymnasium."""
    cases = [
        ("CartPole-v1", 64, 4096, peers.index_mlp_policy(4, 2), "same MLP, action index"),
        ("Pong-v5", 16, 1024, peers.pixel_index_policy((4, 84, 84), 6), "4x84x84 uint8, linear"),
    ]
    for env_id, num_envs, fpb, policy, what in cases:
        frames = max(3 * s.frames, s.min_batches * fpb)
        config = f"{num_envs} envs/worker, 2 workers, fpb={fpb}, {what}"
        env_fn = functools.partial(make_env, env_id, num_envs=num_envs, backend="envpool")
        makes = {
            "tdscheme envpool": functools.partial(
                tdscheme_collector, env_fn, policy, frames_per_batch=fpb, sync=False
            ),
            "hand-written Ray envpool": functools.partial(
                peers.MinimalRayCollector, env_id, num_envs=num_envs, frames_per_batch=fpb,
                worker_cls=peers.MinimalEnvPoolWorker,
            ),
        }  # fmt: skip
        if env_id == "Pong-v5":  # the gymnasium backend with EnvPool's preprocessing
            atari_fn = functools.partial(gym_atari_env, "ALE/Pong-v5", num_envs)
            pixels = peers.pixel_policy((4, 84, 84), 6)  # one-hot actions, as GymWrapper's
            makes["tdscheme gymnasium (ale-py)"] = functools.partial(
                tdscheme_collector, atari_fn, pixels, frames_per_batch=fpb, sync=False
            )
        for impl, make in makes.items():
            row = dict(section="envpool", impl=impl, env=env_id, order="first-ready",
                       config=config)  # fmt: skip
            measure(rec, s, row, make, frames=frames)


def section_recommended(rec: Recorder, s: Settings) -> tuple[int, int]:
    """Returns the (num_envs, frames_per_batch) chosen for tdscheme."""
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)
    env_id = "CartPole-v1"

    def run(impl: str, num_envs: int, fpb: int) -> float | None:
        env_fn = functools.partial(make_env, env_id, num_envs=num_envs)
        make = functools.partial(
            tdscheme_collector, env_fn, policy, frames_per_batch=fpb, sync=False
        )
        config = f"{num_envs} envs/collector, 2 collectors, fpb={fpb}"
        row = dict(section="recommended", impl=impl, env=env_id, order="first-ready", config=config)
        return measure(rec, s, row, make, frames=max(3 * s.frames, s.min_batches * fpb))

    # Sweep num_envs at the first frames_per_batch, then the other frames_per_batch at the
    # best num_envs; the chosen configuration is measured again, free of max-of-noise bias.
    fpb0 = s.sweep_frames_per_batch[0]
    best = (s.sweep_num_envs[0], fpb0)
    if len(s.sweep_num_envs) * len(s.sweep_frames_per_batch) > 1:
        sweep = {(k, fpb0): run("tdscheme sweep", k, fpb0) for k in s.sweep_num_envs}
        best_k = max(sweep, key=lambda key: sweep[key] or 0.0)[0]
        for fpb in s.sweep_frames_per_batch[1:]:
            sweep[(best_k, fpb)] = run("tdscheme sweep", best_k, fpb)
        best = max(sweep, key=lambda key: sweep[key] or 0.0)
        log(f"recommended: tdscheme's best is num_envs={best[0]}, frames_per_batch={best[1]}")
    run("tdscheme", *best)

    for n in s.docstring_collectors:
        make = functools.partial(
            peers.torchrl_docstring_collector,
            functools.partial(make_env, env_id),
            policy,
            num_collectors=n,
            total_frames=TOTAL_FRAMES,
            remote_configs={"num_cpus": 1},
        )
        row = dict(
            section="recommended",
            impl=f"torchrl docstring x{n}",
            env=env_id,
            order="first-ready",
            config=f"1 env/collector, {n} collector(s), fpb=200",
        )
        measure(rec, s, row, make)
    return best


def section_limits(rec: Recorder, s: Settings, num_envs: int, fpb: int) -> None:
    env_id = "CartPole-v1"
    vec = f"{num_envs} envs (gym SyncVectorEnv), fpb={fpb}"
    frames_vec = max(3 * s.frames, s.min_batches * fpb)
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)
    ray_collector = functools.partial(peers.MinimalRayCollector, env_id)
    in_process = functools.partial(peers.InProcessCollector, env_id)
    torchrl_local = functools.partial(peers.torchrl_local_collector, policy=policy)
    runs = [
        (
            "hand-written Ray",
            "first-ready",
            "1 env/actor, 2 actors, fpb=1000",
            functools.partial(ray_collector, num_envs=1, frames_per_batch=1000),
            s.frames,
        ),
        (
            "hand-written Ray",
            "first-ready",
            f"{vec}/actor, 2 actors",
            functools.partial(ray_collector, num_envs=num_envs, frames_per_batch=fpb),
            frames_vec,
        ),
        (
            "in-process, no Ray",
            "-",
            "1 env, fpb=1000",
            functools.partial(in_process, num_envs=1, frames_per_batch=1000),
            s.frames,
        ),
        (
            "in-process, no Ray",
            "-",
            vec,
            functools.partial(in_process, num_envs=num_envs, frames_per_batch=fpb),
            frames_vec,
        ),
        (
            "torchrl Collector",
            "-",
            "1 env, fpb=1000",
            functools.partial(
                torchrl_local, functools.partial(make_env, env_id), frames_per_batch=1000
            ),
            s.frames,
        ),
        (
            "torchrl Collector",
            "-",
            "8 envs (make_env num_envs=8), fpb=1000",
            functools.partial(
                torchrl_local,
                functools.partial(make_env, env_id, num_envs=8),
                frames_per_batch=1000,
            ),
            s.frames,
        ),
    ]
    for impl, order, config, make, frames in runs:
        row = dict(section="limits", impl=impl, env=env_id, order=order, config=config)
        measure(rec, s, row, make, frames=frames)


def section_scale(rec: Recorder, s: Settings) -> None:
    """frames/s with 2, 4, 8, 14 collectors (1 env each), and the fraction of linear scaling."""
    env_id = "CartPole-v1"
    torch.manual_seed(0)
    policy = mlp_policy(4, 2)
    env_fn = functools.partial(make_env, env_id)
    base: dict[str, float | None] = {}
    for n in s.scale_collectors:
        for impl, factory in RAY_COLLECTORS.items():
            make = functools.partial(
                factory, env_fn, policy, frames_per_batch=1000, sync=False, num_collectors=n
            )
            config = f"{n} collectors, 1 env each, fpb=1000"
            row = dict(section="scale", impl=impl, env=env_id, order="first-ready", config=config)
            fps = measure(rec, s, row, make, frames=max(s.frames, 1000 * n * s.min_batches))
            base.setdefault(impl, fps and fps * 2 / n)
            linear = fps / (base[impl] * n / 2) if fps and base[impl] else None
            rec.add(Measurement(**row, metric="linear_fraction", value=linear, unit="x"))
