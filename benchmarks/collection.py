"""Collection benchmark: tdscheme's RayCollector against torchrl's, and against the limits.

Everything runs in one process on one Ray (``num_cpus=2``, no dashboard); every
collector or actor is shut down after its measurement, and the next one starts
once Ray has its CPUs back. Every Ray collector gets ``{"num_cpus": 1}`` per
actor. Run from the repository root::

    .venv/bin/python benchmarks/collection.py                 # full run, a few minutes
    .venv/bin/python benchmarks/collection.py --quick         # smoke test
    .venv/bin/python benchmarks/collection.py --sections same,push --frames 20000 --out r.md
    .venv/bin/python benchmarks/collection.py --scale --out r.md  # 2-14 collectors, 16 cores

Sections (``--sections``, default all):

* ``same``: both RayCollectors with the same env factory, the same 2x64 MLP,
  ``frames_per_batch=1000``, 2 collectors, ``sync`` False (first-ready) and
  True (stacked), CartPole-v1 and Pendulum-v1: frames/s over ``--frames``
  frames after one warm-up batch, and seconds from construction to first batch.
* ``envpool``: tdscheme with ``make_env(..., backend="envpool")`` (EnvPool's
  C++ threads, torchrl's ``MultiThreadedEnv``), 2 workers: CartPole-v1 (64 envs
  per worker, 4096 frames per batch, the same MLP writing action indices) next
  to the ``batched`` rows (gymnasium backend, hand-written limit), and Pong-v5
  (4 stacked 84x84 frames, 16 envs per worker, 1024 frames per batch, a tiny
  linear policy); each next to the hand-written limit over EnvPool (plain
  actors stepping EnvPool with the same torch policy, numpy batches), and Pong
  also through the gymnasium backend (ale-py with EnvPool's preprocessing:
  ``AtariPreprocessing`` + 4 stacked frames, the lean path). Rows are n/a with
  the reason where EnvPool or ale-py + opencv (the ``clients`` extra) are missing.
* ``push``: pushing a ~1M-parameter MLP to 2 collectors, timed until every
  worker has the weights: the first push and the median of the next ones
  (every worker constructed and idle, before iterating), and the median of
  pushes made between batches of a running collection (a push then also waits
  for the batches the workers are collecting: one worker's for torchrl, both
  for tdscheme, whose workers prefetch the next batch).
* ``large``: 4x84x84 uint8 observations, a tiny policy (transport dominates):
  frames/s, the driver's wait for a batch that is already done, and the
  ``ray.get`` of one ready batch from an actor as a pickled TensorDict, as a
  tdscheme codec payload (decoded) and as a numpy dict.
* ``recommended``: tdscheme as we recommend it (batched envs per collector,
  large batches: the sweep is reported, the chosen configuration measured
  again) against torchrl's RayCollector set up as its docstring example
  (1 collector, 1 env, ``frames_per_batch=200``) and the same with 2 collectors.
* ``limits``: a hand-written Ray collector (plain actors, gymnasium, torch,
  numpy batches; 1 env and a vector env), the same loop in-process without
  Ray, and torchrl's single-process ``Collector`` (1 env and 8 batched envs).
* ``startup``: what a user's script waits for: a fresh Python process per run that
  builds the collector with no Ray running (each library starts its own, as it does
  for a user: tdscheme's local Ray preloads the worker modules into the processes it
  prestarts; torchrl's calls ``ray.init()``) and takes the first batch (CartPole-v1,
  2 collectors, ``frames_per_batch=1000``); construction to first batch and process
  start to first batch (imports included), the two libraries alternating, median of
  3 runs; and ``tdscheme, Ray up``: tdscheme's local Ray started first and given
  10 s for the worker processes it prestarts to import the worker modules (what
  ``tdscheme train`` arranges by starting Ray while it imports), then the same
  construction; next to it, both libraries after a user's plain ``ray.init()``
  and the same 10 s (``plain Ray up``: nothing preloaded in Ray's workers).
* ``scale`` (``--scale``, not in the default run): frames/s of tdscheme and
  torchrl with 2, 4, 8 and 14 collectors (1 CartPole env each, 1000 frames per
  batch, first-ready) on a Ray of ``os.cpu_count()`` CPUs, and each one's
  fraction of linear scaling from 2 collectors. Needs 16 cores.

Output: one JSON line per measurement on stdout, then one table per section;
``(1.83x)`` after a value is tdscheme's speedup over that row (rates:
tdscheme/row, times: row/tdscheme; >1 means tdscheme is better). ``--out``
writes the tables as a markdown section for ``benchmarks/results/`` (``collection.md``,
``collection_limits.md``); the latest figures go in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import signal
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import peers  # benchmarks/peers.py, next to this script (Ray workers see this directory too)
import ray
import torch
from peers import mlp_policy, pixels_env
from report import Recorder, parse_section_args, run_sections

from tdscheme.envs import make_env

SECTIONS = (
    "same", "batched", "envpool", "startup", "push", "large", "recommended", "limits", "scale",
)  # fmt: skip
DEFAULT_SECTIONS = tuple(x for x in SECTIONS if x != "scale")  # scale: --scale, 16 cores
SCALE_COLLECTORS = (2, 4, 8, 14)
# torchrl 0.14.1's RayCollector yields nothing with total_frames=-1 (its loop tests
# collected < total), so both collectors get the same huge total and the loops break.
TOTAL_FRAMES = 2**40
ENVS = {"CartPole-v1": (4, 2, True), "Pendulum-v1": (3, 1, False)}
ORDER = {False: "first-ready", True: "stacked"}
PIXELS = (4, 84, 84)
METRICS = {  # metric -> column title
    "frames_per_s": "frames/s",
    "first_batch_s": "construction to first batch",
    "ready_batch_wait_s": "wait for a ready batch (median)",
    "transfer_s": "ray.get of one batch (median)",
    "push_first_s": "first push",
    "push_idle_median_s": "push to idle workers (median)",
    "push_in_loop_median_s": "push between batches (median)",
    "linear_fraction": "fraction of linear scaling",
    "process_to_first_batch_s": "process start to first batch (imports, Ray start)",
}


@dataclass
class Settings:
    """What one run measures."""

    frames: int = 20_000
    min_batches: int = 3
    pushes: int = 10
    transfer_reps: int = 9
    ready_waits: int = 5
    timeout_s: float = 240.0
    sweep_num_envs: tuple[int, ...] = (16, 32, 64)
    sweep_frames_per_batch: tuple[int, ...] = (4096, 8192)
    same_matrix: tuple[tuple[str, bool], ...] = tuple(
        (env, sync) for env in ENVS for sync in (False, True)
    )
    docstring_collectors: tuple[int, ...] = (1, 2)
    startup_runs: int = 3
    prestart_wait_s: float = 10.0  # startup, "Ray up": time for the prestarted workers' imports
    scale_collectors: tuple[int, ...] = SCALE_COLLECTORS

    @classmethod
    def quick(cls, frames: int | None) -> Settings:
        """Tiny counts and one case per code path: a smoke test."""
        return cls(
            frames=frames or 2_000,
            min_batches=2,
            pushes=2,
            transfer_reps=2,
            ready_waits=2,
            timeout_s=120.0,
            sweep_num_envs=(32,),
            sweep_frames_per_batch=(2048,),
            same_matrix=(("Pendulum-v1", True),),  # first-ready CartPole runs in push, large
            docstring_collectors=(1,),
            startup_runs=1,
            scale_collectors=(2, 4),
        )


@dataclass
class Measurement:
    """One JSON line; ``value`` is None (n/a) when ``note`` says why."""

    section: str
    impl: str
    env: str
    order: str
    metric: str
    value: float | None
    unit: str
    config: str = ""
    note: str = ""


def log(msg: str) -> None:
    print(f"[collection] {msg}", file=sys.stderr, flush=True)


def tdscheme_collector(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    from tdscheme import RayCollector  # missing -> ImportError -> reported as n/a

    kwargs.setdefault("num_collectors", 2)
    return RayCollector(
        env_fn, policy, total_frames=TOTAL_FRAMES, remote_configs={"num_cpus": 1}, **kwargs
    )


def torchrl_collector(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    return peers.torchrl_ray_collector(
        env_fn, policy, total_frames=TOTAL_FRAMES, remote_configs={"num_cpus": 1}, **kwargs
    )


def tdscheme_torchrl_class(env_fn: Callable, policy: Any, **kwargs: Any) -> Any:
    """tdscheme with ``collector_class=Collector``: torchrl's class in each worker, exactly."""
    from tdscheme.rollout.torchrl_names import Collector

    return tdscheme_collector(env_fn, policy, collector_class=Collector, **kwargs)


RAY_COLLECTORS = {"tdscheme": tdscheme_collector, "torchrl": torchrl_collector}
SAME_IMPLS = {**RAY_COLLECTORS, "tdscheme Collector": tdscheme_torchrl_class}
ACTORS = {"tdscheme": lambda c: c.workers, "torchrl": lambda c: c.remote_collectors}


def wait_ready(impl: str, collector: Any, timeout_s: float) -> None:
    """Blocks until every worker actor has finished its constructor.

    torchrl's RayCollector constructor already waits for that (it ``ray.get``s each
    worker's ``register_scheme_receiver``); tdscheme's returns at once. Waiting here
    makes a first push time the push, not the actors' start.
    """
    actors = ACTORS[impl](collector)
    ray.get([actor.__ray_ready__.remote() for actor in actors], timeout=timeout_s)


# ---------------------------------------------------------------- harness


@contextlib.contextmanager
def deadline(timeout_s: float) -> Iterator[None]:
    """Raises TimeoutError in the main thread if the block runs past ``timeout_s``."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"measurement ran past {timeout_s:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def settle(timeout_s: float = 60.0) -> None:
    """Waits until every Ray CPU is free again (the last actors are gone), then a bit more."""
    gc.collect()
    total = ray.cluster_resources().get("CPU", 0)
    end = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < total and time.monotonic() < end:
        time.sleep(0.1)
    time.sleep(0.2)  # killed actor processes may still be exiting


@contextlib.contextmanager
def running(make: Callable[[], Any], timeout_s: float) -> Iterator[tuple[Any, float]]:
    """Builds a collector; yields it and its construction start time; always shuts it down.

    Call :func:`settle` after handling any error: a collector whose constructor was
    interrupted is only collected (and its actors killed) once the traceback is gone.
    """
    collector = None
    try:
        with deadline(timeout_s), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*before weight synchronization.*")
            warnings.filterwarnings("ignore", message=".*missing transforms required.*")
            start = time.perf_counter()
            collector = make()
            yield collector, start
    finally:
        if collector is not None:
            with contextlib.suppress(Exception):
                collector.shutdown()


def frames_in(batch: Any) -> int:
    return int(batch["reward"].size) if isinstance(batch, dict) else int(batch.numel())


def collect(it: Iterator[Any], *, frames: int, min_batches: int) -> float:
    """Frames/s of ``it`` over at least ``frames`` frames and ``min_batches`` batches."""
    count = batches = 0
    start = time.perf_counter()
    while count < frames or batches < min_batches:
        count += frames_in(next(it))
        batches += 1
    return count / (time.perf_counter() - start)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def failure(err: BaseException) -> str:
    """Logs the traceback; returns the note for an n/a measurement."""
    log(traceback.format_exc())
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, TimeoutError):
        cause = cause.__cause__ or cause.__context__
    err = cause or err  # a deadline firing inside C code surfaces as another error
    return f"n/a: {type(err).__name__}: {err}"[:300]


def measure(
    rec: Recorder,
    s: Settings,
    row: dict[str, str],
    make: Callable[[], Any],
    *,
    frames: int | None = None,
    after: Callable[[Iterator[Any], float], dict[str, float]] | None = None,
) -> float | None:
    """Time to first batch and frames/s of one collector; n/a (with the error) if it fails.

    ``row`` holds section, impl, env, order, config. ``after(iterator, frames_per_s)``
    may return more measurements (seconds) taken before shutdown.
    """
    results: dict[str, float | None] = {"first_batch_s": None, "frames_per_s": None}
    note = ""
    log(" | ".join(row.values()))
    try:
        with running(make, s.timeout_s) as (collector, start):
            it = iter(collector)
            next(it)
            results["first_batch_s"] = time.perf_counter() - start
            fps = collect(it, frames=frames or s.frames, min_batches=s.min_batches)
            results["frames_per_s"] = fps
            if after is not None:
                results.update(after(it, fps))
    except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
        note = failure(err)
    settle()
    for metric, value in results.items():
        unit = "frames/s" if metric == "frames_per_s" else "s"
        rec.add(Measurement(**row, metric=metric, value=value, unit=unit, note=note))
    return results["frames_per_s"]


# ---------------------------------------------------------------- sections


def section_same(rec: Recorder, s: Settings) -> None:
    config = "1 env/collector, 2 collectors, fpb=1000"
    for i, (env_id, sync) in enumerate(s.same_matrix):
        obs_dim, action_dim, discrete = ENVS[env_id]
        impls = list(SAME_IMPLS.items())
        for impl, factory in impls[::-1] if i % 2 else impls:  # alternate who goes first
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
    rec: Recorder, s: Settings, *, section: str = "batched", env_fn: Callable | None = None
) -> None:
    """64 envs per worker, 2 workers: tdscheme, torchrl and the hand-written Ray collector.

    ``env_fn`` is what tdscheme's and torchrl's workers step (default ``make_env``'s 64
    CartPole envs, auto-reset disabled); ``benchmarks/fast_paths.py`` passes others,
    recorded under its own ``section`` names.
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
        "hand-written Ray": functools.partial(
            peers.MinimalRayCollector, env_id, num_envs=num_envs, frames_per_batch=fpb
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


#: One startup run: a fresh process, no Ray running; prints a JSON line with the times.
STARTUP_SCRIPT = """
import functools, json, sys, time
start = time.perf_counter()
impl = sys.argv[1]
if impl == "tdscheme, Ray up":  # as `tdscheme train`: Ray first, its workers preload meanwhile
    import ray
    from tdscheme.runtime import local_ray_config
    ray.init(**local_ray_config())
    time.sleep(float(sys.argv[2]))
elif impl.endswith("plain Ray up"):  # the user's own ray.init(), the same wait: nothing preloaded
    import ray
    ray.init(num_cpus=2, include_dashboard=False)
    time.sleep(float(sys.argv[2]))
if impl.startswith("tdscheme"):
    from tdscheme import RayCollector
else:
    from torchrl.collectors.distributed import RayCollector
import torch
from tensordict.nn import TensorDictModule
from tdscheme.envs import make_env
class OneHotArgmax(torch.nn.Module):  # defined here: Ray pickles __main__'s classes by value
    def forward(self, logits):
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)
torch.manual_seed(0)
layers = [torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh()]
net = torch.nn.Sequential(*layers, torch.nn.Linear(64, 2), OneHotArgmax())  # peers.mlp_policy(4, 2)
policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
built = time.perf_counter()
collector = RayCollector(
    functools.partial(make_env, "CartPole-v1"), policy, frames_per_batch=1000,
    total_frames=2**40, num_collectors=2, remote_configs={"num_cpus": 1},
)
next(iter(collector))
first = time.perf_counter()
collector.shutdown()
import ray
ray.shutdown()
print(json.dumps({"construct": first - built, "process": first - start}), flush=True)
"""


def section_startup(rec: Recorder, s: Settings) -> None:
    """Construction (and process start) to first batch in a fresh process, Ray started by each."""
    import subprocess
    import tempfile

    times: dict[str, list[tuple[float, float]]] = {"tdscheme": [], "torchrl": []}
    # construction only: Ray started, its workers prestarted (and given the same time to import)
    times["tdscheme, Ray up"] = []  # tdscheme's local Ray: its workers preload tdscheme's worker
    times["tdscheme, plain Ray up"] = []  # a user's plain ray.init(): nothing preloaded
    times["torchrl, plain Ray up"] = []
    notes: dict[str, str] = {}
    for run in range(s.startup_runs):
        for impl in list(times)[:: 1 if run % 2 == 0 else -1]:  # alternate who goes first
            log(f"startup | {impl} | run {run}")
            with tempfile.TemporaryDirectory(prefix="tds-", dir="/tmp") as tmp:
                env = dict(os.environ, RAY_TMPDIR=tmp)  # its own Ray, not this script's
                env.pop("RAY_ADDRESS", None)
                started = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-c", STARTUP_SCRIPT, impl, str(s.prestart_wait_s)],
                    env=env, text=True,
                    capture_output=True, timeout=s.timeout_s,
                )  # fmt: skip
                wall = time.perf_counter() - started
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                notes[impl] = f"n/a: exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
                continue
            got = json.loads(lines[-1])
            times[impl].append((got["construct"], got["process"]))
            log(
                f"  construct {got['construct']:.2f} s, process {got['process']:.2f} s, wall {wall:.1f} s"
            )
            settle()
    config = f"fresh process, 2 collectors, fpb=1000, median of {s.startup_runs}"
    for impl, runs in times.items():
        row = dict(section="startup", impl=impl, env="CartPole-v1", order="first-ready",
                   config=config)  # fmt: skip
        for index, metric in enumerate(("first_batch_s", "process_to_first_batch_s")):
            if impl.endswith("Ray up") and index == 1:
                continue  # its process waited on purpose
            value = statistics.median(r[index] for r in runs) if runs else None
            rec.add(Measurement(**row, metric=metric, value=value, unit="s",
                                note=notes.get(impl, "")))  # fmt: skip


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


def section_push(rec: Recorder, s: Settings) -> None:
    torch.manual_seed(0)
    policy = mlp_policy(4, 2, hidden=1000, depth=2)
    params = sum(p.numel() for p in policy.parameters())
    config = f"{params:,} params ({params * 4 / 1e6:.1f} MB), 2 collectors, fpb=1000"
    log(f"push: the policy has {params:,} parameters")

    def bump() -> None:  # every push carries new values
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(1e-4)

    def push_tdscheme(collector: Any) -> None:
        # Blocks until every worker acknowledged the pushed version.
        collector.update_policy_weights_(policy)
        collector.wait_for_weights(timeout_s=60)

    pushes = {"tdscheme": push_tdscheme, "torchrl": lambda c: peers.torchrl_push(c, policy)}
    for impl, factory in RAY_COLLECTORS.items():
        push = pushes[impl]
        values: dict[str, float | None] = dict.fromkeys(
            ("push_first_s", "push_idle_median_s", "push_in_loop_median_s")
        )
        note = ""
        log(f"push | {impl}")
        make = functools.partial(
            factory,
            functools.partial(make_env, "CartPole-v1"),
            policy,
            frames_per_batch=1000,
            sync=False,
        )
        try:
            with running(make, s.timeout_s) as (collector, _):
                wait_ready(impl, collector, s.timeout_s)
                bump()
                values["push_first_s"] = timed(lambda c=collector, f=push: f(c))
                idle = []
                for _ in range(s.pushes):
                    bump()
                    idle.append(timed(lambda c=collector, f=push: f(c)))
                values["push_idle_median_s"] = statistics.median(idle)
                if impl == "torchrl":
                    ok = peers.torchrl_weights_arrived(collector, policy)
                    note = "arrival verified" if ok else "WEIGHTS DID NOT ARRIVE"
                it = iter(collector)
                in_loop = []
                for _ in range(s.pushes):
                    next(it)
                    bump()
                    in_loop.append(timed(lambda c=collector, f=push: f(c)))
                values["push_in_loop_median_s"] = statistics.median(in_loop)
        except Exception as err:  # noqa: BLE001
            note = failure(err)
        settle()
        for metric, value in values.items():
            rec.add(
                Measurement(
                    "push", impl, "CartPole-v1", "first-ready", metric, value, "s", config, note
                )
            )


def section_large(rec: Recorder, s: Settings) -> None:
    env_fn = functools.partial(pixels_env, "CartPole-v1", PIXELS)
    policy = peers.pixel_policy(PIXELS, 2)

    def ready_wait(it: Iterator[Any], fps: float) -> dict[str, float]:
        # Sleep ~2 worker-batch times so that the next batch is surely done, then time next().
        sleep_s = min(max(2 * 2 * 1000 / fps, 0.1), 5.0)
        waits = []
        for _ in range(s.ready_waits):
            time.sleep(sleep_s)
            waits.append(timed(lambda: next(it)))
        return {"ready_batch_wait_s": statistics.median(waits)}

    for impl, factory in RAY_COLLECTORS.items():
        make = functools.partial(factory, env_fn, policy, frames_per_batch=1000, sync=False)
        config = "4x84x84 uint8 obs, 2 collectors, fpb=1000"
        row = dict(
            section="large", impl=impl, env="CartPole pixels", order="first-ready", config=config
        )
        measure(rec, s, row, make, frames=s.frames // 2, after=ready_wait)
    transfer(rec, s, env_fn, policy)


def transfer(rec: Recorder, s: Settings, env_fn: Callable, policy: Any) -> None:
    """``ray.get`` of one ready 1000-frame pixel batch from an actor, in three encodings."""
    log("large | transfer of one batch")
    server = None
    try:
        with deadline(s.timeout_s):
            server = ray.remote(num_cpus=1)(peers.BatchServer).remote(env_fn, policy, 1000)
            nbytes = ray.get(server.nbytes.remote(), timeout=s.timeout_s)
            has_codec = ray.get(server.has_codec.remote(), timeout=s.timeout_s)

            # Warm the object store first: the first few 56 MB results of a fresh Ray pay
            # page faults, which would otherwise land on whichever encoding runs first.
            for _ in range(3):
                for method in ("tensordict", "numpy_dict", "ping"):
                    ray.get(getattr(server, method).remote(), timeout=60)

            def get(method: str, decode: Callable[[Any], Any] = lambda x: x) -> float:
                call = getattr(server, method).remote
                return peers.median_transfer_s(
                    lambda: decode(ray.get(call(), timeout=60)), reps=s.transfer_reps
                )

            codec: tuple[float | None, str] = (None, "n/a: no tdscheme.transport.TensorDictCodec")
            if has_codec:
                try:
                    from tdscheme.transport import TensorDictCodec

                    codec = (get("payload", TensorDictCodec().decode), "")
                except Exception as err:  # noqa: BLE001
                    codec = (None, failure(err))
            results = {
                "tdscheme codec": codec,
                "pickled TensorDict": (get("tensordict"), ""),
                "numpy dict (limit)": (get("numpy_dict"), ""),
                "empty call (floor)": (get("ping"), ""),
            }
        config = f"one 1000-frame batch, {nbytes / 1e6:.1f} MB"
        for impl, (value, note) in results.items():
            rec.add(
                Measurement(
                    "large", impl, "CartPole pixels", "-", "transfer_s", value, "s", config, note
                )
            )
    except Exception as err:  # noqa: BLE001
        failure(err)
    finally:
        if server is not None:
            ray.kill(server, no_restart=True)
    settle()


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


# ---------------------------------------------------------------- report


def references(ms: list[Measurement], m: Measurement) -> dict[str, Measurement]:
    """The tdscheme measurements ``m`` is compared with, by label."""

    def find(section: str, env: str, order: str, impl: str) -> Measurement | None:
        return next(
            (
                x
                for x in ms
                if (x.section, x.env, x.order, x.metric, x.impl)
                == (section, env, order, m.metric, impl)
                and (section != "scale" or x.config == m.config)  # same number of collectors
            ),
            None,
        )

    if m.unit == "x" or (m.section == "startup" and not m.impl.startswith("torchrl")):
        return {}  # already a ratio; or a tdscheme start-up row (torchrl's rows have the ratio)
    if m.section == "startup" and m.impl == "torchrl, plain Ray up":  # both given a running Ray
        refs = {
            "tdscheme's Ray": find("startup", m.env, m.order, "tdscheme, Ray up"),
            "plain Ray": find("startup", m.env, m.order, "tdscheme, plain Ray up"),
        }
        return {k: v for k, v in refs.items() if v is not None}
    if m.section == "envpool":  # vs the gymnasium backend and the hand-written limits
        if m.impl.startswith("hand-written"):
            return {}
        refs = {
            "hand envpool": find("envpool", m.env, "first-ready", "hand-written Ray envpool"),
            "gym": find("batched", m.env, "first-ready", "tdscheme"),
            "hand gym": find("batched", m.env, "first-ready", "hand-written Ray"),
        }
        return {k: v for k, v in refs.items() if v is not None and v is not m}
    if m.section == "limits":  # one env: tdscheme's same-config row; batched: recommended
        if m.config.startswith("1 env"):
            refs = {"same": find("same", m.env, "first-ready", "tdscheme")}
        else:
            refs = {"rec.": find("recommended", m.env, "first-ready", "tdscheme")}
    else:
        impl = "tdscheme codec" if m.metric == "transfer_s" else "tdscheme"
        refs = {"": find(m.section, m.env, m.order, impl)}
        if m.section == "same" and m.impl == "torchrl":  # the user's collector_class=Collector
            refs["Collector"] = find(m.section, m.env, m.order, "tdscheme Collector")
    return {k: v for k, v in refs.items() if v is not None and v is not m}


def cell(ms: list[Measurement], m: Measurement) -> str:
    if m.value is None:
        return "n/a"
    if m.unit == "s":
        text = f"{m.value * 1e3:.3g} ms" if m.value < 1 else f"{m.value:.3g} s"
    elif m.unit == "x":
        text = f"{m.value:.2f}"
    else:
        text = f"{m.value:,.0f}"
    ratios = []
    for label, ref in references(ms, m).items():
        if ref.value:
            r = ref.value / m.value if m.unit.endswith("/s") else m.value / ref.value
            if m.section == "envpool":  # EnvPool's rate as a fraction of the reference's
                r = 1 / r
            ratios.append(f"{label} {r:.3g}x".strip())
    return f"{text} ({', '.join(ratios)})" if ratios else text


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table per section: a row per (env, order, impl, config), a column per metric."""
    out = {}
    for section in dict.fromkeys(m.section for m in ms):
        sm = [m for m in ms if m.section == section]
        metrics = list(dict.fromkeys(m.metric for m in sm))
        keys = dict.fromkeys((m.env, m.order, m.impl, m.config) for m in sm)
        table = [
            ["env", "order", "impl", "config"] + [METRICS.get(x, x) for x in metrics] + ["note"]
        ]
        for key in keys:
            row = [m for m in sm if (m.env, m.order, m.impl, m.config) == key]
            by_metric = {m.metric: cell(ms, m) for m in row}
            notes = "; ".join(dict.fromkeys(m.note for m in row if m.note))
            table.append([*key, *(by_metric.get(x, "") for x in metrics), notes])
        out[section] = table
    return out


TITLE = "Collection: tdscheme's RayCollector vs torchrl's RayCollector, and the limits"
INTRO = (
    'One Ray (`num_cpus=2`) for the whole run, `{"num_cpus": 1}` per collector actor; '
    "frames/s after one warm-up batch; the first batch includes construction. "
    "`(1.83x)` after a value is tdscheme's speedup over that row (rates: tdscheme/row, "
    "times: row/tdscheme; >1 means tdscheme is better); limits with one env are compared "
    "with tdscheme's same-configuration row (`same`), batched ones with its recommended "
    "row (`rec.`); EnvPool rows give their own rate over the gymnasium backend's (`gym`) "
    "and the hand-written collector's (`hand`) in the batched section. "
    "See the docstring of `benchmarks/collection.py` for what each section measures."
)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    scale = "--scale" in argv
    argv = [x for x in argv if x != "--scale"] + (["--sections", "scale"] if scale else [])
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "frames measured per collector after the warm-up "
        "batch (default 20000, 2000 with --quick)", argv,
    )  # fmt: skip
    if "--sections" not in argv:
        args.sections = list(DEFAULT_SECTIONS)
    s = Settings.quick(args.frames) if args.quick else Settings(frames=args.frames or 20_000)

    def run(rec: Recorder) -> None:
        best = (s.sweep_num_envs[0], s.sweep_frames_per_batch[0])
        for section in SECTIONS:  # fixed order: limits reuse recommended's choice
            if section not in args.sections:
                continue
            if section == "recommended":
                best = section_recommended(rec, s)
            elif section == "limits":
                section_limits(rec, s, *best)
            else:
                sections = {
                    "same": section_same, "batched": section_batched,
                    "envpool": section_envpool, "startup": section_startup,
                    "push": section_push,
                    "large": section_large, "scale": section_scale,
                }  # fmt: skip
                sections[section](rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="collection.py", argv=argv,
        intro=INTRO, num_cpus=(os.cpu_count() or 2) if "scale" in args.sections else 2,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
