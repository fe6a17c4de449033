"""Issue 23's fast paths: tdscheme's RayCollector vs a hand-written Ray collector, and torchrl's.

Three workloads, side by side in one run: CartPole-v1, 64 envs per worker, 2 workers of
``{"num_cpus": 1}``, the 2x64 tanh MLP of ``peers.mlp_policy``, 4096 frames per worker
batch, first-ready order (``collection.py``'s ``batched`` configuration). Everything runs
in one process on one Ray (``num_cpus=2``, no dashboard); every collector, actor and buffer
is shut down after its measurement, and the next one starts once Ray has its CPUs back.
The hand-written Ray collector is ``peers.MinimalRayCollector``: plain Ray actors stepping
a gymnasium ``SyncVectorEnv`` of 64 envs in the section's autoreset mode with the torch MLP
and returning numpy batches. In the CartPole sections a second hand-written row,
``hand-written Ray, torchrl layout``, runs the same actors writing torchrl's layout of each
batch by hand (``layout_worker.MinimalLayoutWorker``: next observations beside the
observations, one-hot actions, the flags, no transition at a reset step; numpy arrays):
what any collector that hands a torchrl user their layout must do beyond the numpy floor.
torchrl's ``RayCollector`` is the last row, for reference.
Run from the repository root::

    .venv/bin/python benchmarks/fast_paths.py --out section.md   # full run, a few minutes
    .venv/bin/python benchmarks/fast_paths.py --quick            # smoke test

Sections (``--sections``, default all):

* ``disabled``: tdscheme and torchrl step ``tdscheme.envs.make_env("CartPole-v1",
  num_envs=64)`` (a gymnasium ``SyncVectorEnv``, ``AutoresetMode.DISABLED``: torchrl
  resets the envs that ended). ``collection.py``'s ``batched`` rows, measured by
  ``collection_rates.section_batched``: frames/s over 3x ``--frames`` frames (at least
  2 batches) after one warm-up batch, and construction to first batch.
* ``same_step``: the same, tdscheme and torchrl stepping torchrl's ``GymWrapper`` around
  a ``SyncVectorEnv`` of 64 CartPole-v1 with ``AutoresetMode.SAME_STEP``
  (``vector_envs.same_step_env``).
* ``next_step``: the workers' env factory returns ``gym.make_vec("CartPole-v1",
  num_envs=64, vectorization_mode="sync")`` itself: gymnasium's default autoreset
  (``NEXT_STEP``), a plain gymnasium env. tdscheme's workers wrap it
  (``tdscheme.envs.wrap_gym_env``: no reset steps); torchrl's refuse it (its
  ``GymWrapper`` is not called on it: the row fails); the hand-written actors step the
  same NEXT_STEP vector env and count its transitions (a reset step is none).
* ``next_step_native``: the factory returns ``gym.make_vec("CartPole-v1", num_envs=64)``
  (gymnasium's default for CartPole: its own ``CartPoleVectorEnv``, all copies in one numpy
  call, NEXT_STEP). tdscheme's lean rollout steps it as it is and pads each copy's reset
  steps (``("collector", "mask")``); its rate counts transitions only (the mask), and so
  do the hand-written actors' (the same env, stepped as it is; their batches' ``mask``
  marks the reset steps, ~10 % of CartPole's steps under the untrained greedy MLP: until
  stop 56 they counted them as frames, a ratio ~0.9x of this one). torchrl's
  ``GymWrapper`` fails on it.
  The row ``tdscheme, index actions`` steps the same env in torchrl's wrapper with
  ``categorical_action_encoding=True`` and the same MLP ending in an argmax (no one-hot
  head): the policy work of the hand-written actors, per step.
* ``pixels``: uint8 4x84x84 frames (``tdscheme.envs.faulty.PixelsLikeObs`` over
  CartPole-v1: the env costs next to nothing, the frames' bytes decide), 16 envs per
  worker in a DISABLED ``SyncVectorEnv``, 2048 frames per worker batch, the linear pixel
  policy of ``peers.pixel_policy``: tdscheme (torchrl's layout: each frame in
  ``"observation"`` and ``("next", "observation")``), tdscheme with torchrl's
  ``compact_obs=True`` (each frame once; ``("next", "observation")`` left to torchrl's
  ``NextStateReconstructor`` at sampling), the hand-written actors (the same vector env,
  each frame once, ``reset_mask``) and torchrl's ``RayCollector``.
* ``background``: collection into a Ray-held torchrl ``RayReplayBuffer``
  (``LazyTensorStorage`` of 1M frames in rows of 64, ``replay.py``'s ``ray_buffer``),
  the first ``init_random_frames=16384`` (2 batches per worker) random actions, then the
  policy's: tdscheme's and torchrl's ``RayCollector(..., replay_buffer=buffer)`` plus
  ``start()`` on ``make_env``'s envs (auto-reset disabled), and the hand-written writer:
  the same plain actors (``peers.MinimalBufferWriter``, ``MinimalRayCollector.start()``),
  each writing ``[64, 64]`` TensorDicts (observation, one-hot action, next observation,
  reward, done, terminated, truncated) with the buffer client's ``extend``. Frames
  written per second (the buffer's write count in frames, ``replay.py``'s
  ``frames_written``) over 30 s after the first batch and 10 s of warm-up (5 s and 3 s
  with ``--quick``); the driver samples nothing meanwhile.
* ``background_pixels``: the same with the ``pixels`` section's envs, policy and batches
  (no random frames), into a ``LazyTensorStorage`` of 32,768 frames in rows of 128; the
  hand-written writer steps a SAME_STEP vector env of the same frames (as in
  ``background``; the final observations from its info) and writes each frame as
  ``observation`` and ``("next", "observation")``, as torchrl's layout holds them. One more row: tdscheme's workers writing into tdscheme's
  ``CompactFrameStorage`` (each frame stored once; a different storage, for reference).

Output: one JSON line per measurement on stdout, then one table per section; the
``vs hand-written`` column is the row's rate over the hand-written row's in the same
section (>1: faster than the hand-written collector). ``--out`` writes the tables as a
markdown section for ``benchmarks/results/``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import collection  # benchmarks/collection.py, next to this script (Ray workers see it too)
import collection_runs
import gymnasium as gym
import peers
import torch
import vector_envs
from collection_rates import section_batched
from collection_runs import Measurement, failure, log
from harness import deadline, settle
from peers import mlp_policy
from replay import frames_written, ray_buffer, stop, write_rate
from report import Recorder, parse_section_args, run_sections

from tdscheme.envs import make_env

SECTIONS = (
    "disabled", "same_step", "next_step", "next_step_native", "pixels", "background",
    "background_pixels",
)  # fmt: skip
ENV_ID, NUM_ENVS, FRAMES_PER_BATCH = "CartPole-v1", 64, 4096  # collection.py's batched section
RANDOM_FRAMES = 2 * FRAMES_PER_BATCH * 2  # 2 random batches per worker, then the policy
BUFFER_FRAMES = 1_000_000
HAND = "hand-written Ray"  # the impl every row is compared with
RATES = {"frames_per_s": "frames/s", "frames_written_per_s": "frames written/s"}
collection.METRICS.setdefault("bytes_per_frame_in_obs", "bytes per frame, in observations")
TITLE = "Issue 23's fast paths: tdscheme vs a hand-written Ray collector (and torchrl)"


@dataclass
class Settings(collection_runs.Settings):
    """What one run measures: ``collection.py``'s settings, and the background windows."""

    warmup_s: float = 10.0
    window_s: float = 30.0

    @classmethod
    def quick(cls, frames: int | None) -> Settings:
        """Tiny counts and short windows: a smoke test."""
        return dataclasses.replace(super().quick(frames), warmup_s=3.0, window_s=5.0)


def section_disabled(rec: Recorder, s: Settings) -> None:
    section_batched(rec, s, section="disabled", hand_mode="DISABLED")


def section_same_step(rec: Recorder, s: Settings) -> None:
    env_fn = functools.partial(vector_envs.same_step_env, ENV_ID, NUM_ENVS)
    section_batched(rec, s, section="same_step", env_fn=env_fn)


def section_next_step(rec: Recorder, s: Settings) -> None:
    """The env factory returns gymnasium's default vector env, unwrapped (see the module)."""
    env_fn = functools.partial(gym.make_vec, ENV_ID, num_envs=NUM_ENVS, vectorization_mode="sync")
    section_batched(rec, s, section="next_step", env_fn=env_fn, hand_mode="NEXT_STEP")


def section_next_step_native(rec: Recorder, s: Settings) -> None:
    """The env factory returns ``gym.make_vec(ENV_ID, NUM_ENVS)``: CartPoleVectorEnv (see the module)."""
    env_fn = functools.partial(gym.make_vec, ENV_ID, num_envs=NUM_ENVS)
    index_env = functools.partial(vector_envs.index_action_vec_env, ENV_ID, NUM_ENVS)
    index_policy = peers.mlp_policy(4, 2, index_actions=True)

    def index_actions(fpb: int) -> Any:
        return collection_runs.tdscheme_collector(
            index_env, index_policy, frames_per_batch=fpb, sync=False
        )

    section_batched(
        rec, s, section="next_step_native", env_fn=env_fn, hand_mode="NEXT_STEP",
        hand_kwargs={"vectorization_mode": "vector_entry_point"},
        extra={"tdscheme, index actions": index_actions},
    )  # fmt: skip


PIXELS, PIXEL_ENVS, PIXEL_FRAMES_PER_BATCH = (4, 84, 84), 16, 2048
PIXEL_BUFFER_FRAMES = 32_768  # 1.8 GB in torchrl's layout


def pixel_vector_env(num_envs: int) -> Any:
    """``num_envs`` CartPole envs observing uint8 frames of ``PIXELS`` (``vector_envs.py``)."""
    return vector_envs.pixel_vector_env(ENV_ID, num_envs, PIXELS)


def section_pixels(rec: Recorder, s: Settings) -> None:
    """Pixel frames from a gymnasium vector env: bytes per frame decide (see the module)."""
    frames = max(3 * s.frames // 4, s.min_batches * PIXEL_FRAMES_PER_BATCH)
    config = f"{PIXEL_ENVS} envs/worker, 2 workers, fpb={PIXEL_FRAMES_PER_BATCH}, 4x84x84 uint8"
    env_fn = functools.partial(pixel_vector_env, PIXEL_ENVS)
    torch.manual_seed(0)
    policy = peers.pixel_policy(PIXELS, 2)
    ours = functools.partial(
        collection_runs.tdscheme_collector, env_fn, policy,
        frames_per_batch=PIXEL_FRAMES_PER_BATCH, sync=False,
    )  # fmt: skip
    makes = {
        "tdscheme": ours,
        "tdscheme dedup_obs=True": functools.partial(ours, dedup_obs=True),
        "tdscheme compact_obs": functools.partial(ours, collector_kwargs={"compact_obs": True}),
        HAND: functools.partial(
            peers.MinimalRayCollector, ENV_ID, num_envs=PIXEL_ENVS,
            frames_per_batch=PIXEL_FRAMES_PER_BATCH,
            worker_kwargs={"autoreset_mode": "DISABLED", "pixels": PIXELS},
        ),
        "torchrl": functools.partial(
            collection_runs.torchrl_collector, env_fn, policy,
            frames_per_batch=PIXEL_FRAMES_PER_BATCH, sync=False,
        ),
    }  # fmt: skip
    for impl, make in makes.items():
        row = dict(section="pixels", impl=impl, env=f"{ENV_ID} pixels", order="first-ready",
                   config=config)  # fmt: skip
        collection_runs.measure(
            rec, s, row, make, frames=frames, after=bytes_per_frame,
            units={"bytes_per_frame_in_obs": "x"},
        )  # fmt: skip


def bytes_per_frame(collector: Any, it: Any, fps: float) -> dict[str, float]:
    """Bytes per frame that crossed Ray, in observations (4x84x84 uint8 = 28,224 bytes):
    tdscheme's ``stats()`` count every payload's buffers over the whole run; for the others,
    the next batch's tensors (they send each leaf as one buffer, as is)."""
    obs_bytes = PIXELS[0] * PIXELS[1] * PIXELS[2]
    stats = collector.stats() if hasattr(collector, "stats") else {}
    if "bytes_received" in stats:
        return {"bytes_per_frame_in_obs": stats["bytes_received"] / stats["frames"] / obs_bytes}
    batch = next(it)
    if isinstance(batch, dict):  # the hand-written collector's numpy arrays
        nbytes, frames = sum(a.nbytes for a in batch.values()), batch["done"].size
    else:
        nbytes = sum(v.numel() * v.element_size() for v in batch.values(True, True))
        frames = batch.numel()
    return {"bytes_per_frame_in_obs": nbytes / frames / obs_bytes}


def background_collector(impl: str, buffer: Any, pixels: bool = False) -> Any:
    """``impl``'s collector writing into ``buffer``, built but not started.

    ``pixels``: the ``pixels`` section's envs and policy, no random frames."""
    envs, fpb = (PIXEL_ENVS, PIXEL_FRAMES_PER_BATCH) if pixels else (NUM_ENVS, FRAMES_PER_BATCH)
    random_frames = 0 if pixels else RANDOM_FRAMES
    if impl == HAND:
        writer = {"buffer": buffer.client(), "random_frames": random_frames // 2}  # per worker
        if pixels:
            writer["pixels"] = PIXELS
        return peers.MinimalRayCollector(
            ENV_ID, num_envs=envs, frames_per_batch=fpb,
            worker_cls=peers.MinimalBufferWriter, worker_kwargs=writer,
        )  # fmt: skip
    torch.manual_seed(0)
    factory = (
        collection_runs.torchrl_collector
        if impl == "torchrl"
        else collection_runs.tdscheme_collector
    )
    if pixels:
        env_fn, policy = functools.partial(pixel_vector_env, envs), peers.pixel_policy(PIXELS, 2)
    else:
        env_fn, policy = functools.partial(make_env, ENV_ID, num_envs=envs), mlp_policy(4, 2)
    return factory(
        env_fn, policy, frames_per_batch=fpb, sync=False, replay_buffer=buffer,
        init_random_frames=random_frames,
    )  # fmt: skip


def pixel_buffer(impl: str) -> Any:
    """A Ray-held buffer of ``PIXEL_BUFFER_FRAMES`` pixel frames: torchrl's ``LazyTensorStorage``
    in rows of a batch's time steps, or, for the ``CompactFrameStorage`` row, tdscheme's."""
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme.replay import CompactFrameStorage

    if "CompactFrameStorage" not in impl:
        return ray_buffer(PIXEL_BUFFER_FRAMES, row=PIXEL_FRAMES_PER_BATCH // PIXEL_ENVS)
    storage = functools.partial(CompactFrameStorage, PIXEL_BUFFER_FRAMES, keys=["observation"])
    return RayReplayBuffer(storage=storage, batch_size=256, remote_config={"num_cpus": 0})


def background_rate(impl: str, s: Settings, pixels: bool = False) -> float:
    """Frames written per second by ``impl`` into a fresh Ray-held buffer; all shut down after."""
    if pixels:
        buffer = pixel_buffer(impl)
    else:
        buffer = ray_buffer(BUFFER_FRAMES, row=FRAMES_PER_BATCH // NUM_ENVS)
    collector = None
    try:
        with deadline(s.timeout_s + s.warmup_s + s.window_s):
            with warnings.catch_warnings():  # torchrl: init_random_frames with sync=False
                warnings.filterwarnings("ignore", message=".*init_random_frames.*")
                collector = background_collector(impl, buffer, pixels)
            collector.start()
            first = PIXEL_FRAMES_PER_BATCH if pixels else FRAMES_PER_BATCH
            fps, _ = write_rate(
                buffer, first_frames=first, warmup_s=s.warmup_s, window_s=s.window_s
            )
            error = getattr(collector, "error", None)  # the hand-written thread's
            if error is not None:
                raise error
            if not fps:
                raise RuntimeError(
                    f"nothing written in the window ({frames_written(buffer)} frames in all)"
                )
            return fps
    finally:
        try:
            if collector is not None and impl == HAND:
                collector.shutdown()
            elif collector is not None:  # replay.py's: torchrl's thread, then its actors
                stop(impl, collector)
        finally:
            buffer.shutdown()


def section_background(rec: Recorder, s: Settings) -> None:
    config = (
        f"{NUM_ENVS} envs/worker, 2 workers, fpb={FRAMES_PER_BATCH}, {RANDOM_FRAMES} random frames"
    )
    for impl in ("tdscheme", HAND, "torchrl"):
        row = dict(section="background", impl=impl, env=ENV_ID, order="first-ready",
                   config=config)  # fmt: skip
        log(" | ".join(row.values()))
        value, note = None, ""
        try:
            value = background_rate(impl, s)
        except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
            note = failure(err)
        settle()
        rec.add(Measurement(**row, metric="frames_written_per_s", value=value, unit="frames/s",
                            note=note))  # fmt: skip


def section_background_pixels(rec: Recorder, s: Settings) -> None:
    """The ``pixels`` section's envs writing into a Ray-held buffer (see the module)."""
    config = f"{PIXEL_ENVS} envs/worker, 2 workers, fpb={PIXEL_FRAMES_PER_BATCH}, 4x84x84 uint8"
    for impl in ("tdscheme", "tdscheme into CompactFrameStorage", HAND, "torchrl"):
        row = dict(section="background_pixels", impl=impl, env=f"{ENV_ID} pixels",
                   order="first-ready", config=config)  # fmt: skip
        log(" | ".join(row.values()))
        value, note = None, ""
        try:
            value = background_rate(impl, s, pixels=True)
        except Exception as err:  # noqa: BLE001 - a failing implementation is reported, not fatal
            note = failure(err)
        settle()
        rec.add(Measurement(**row, metric="frames_written_per_s", value=value, unit="frames/s",
                            note=note))  # fmt: skip


# ---------------------------------------------------------------- report


def vs_hand(ms: list[Measurement], m: Measurement) -> str:
    """``m``'s rate over the hand-written row's of the same section and metric."""
    hand = next(
        (x for x in ms if (x.section, x.metric, x.impl) == (m.section, m.metric, HAND)), None
    )
    if m.value is None or hand is None or not hand.value:
        return "n/a"
    return f"{m.value / hand.value:.3f}x"


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table per section: a row per impl, its rate, its ratio to the hand-written row."""
    out = {}
    for section in dict.fromkeys(m.section for m in ms):
        sm = [m for m in ms if m.section == section]
        rate = next(x for x in dict.fromkeys(m.metric for m in sm) if x in RATES)
        others = [x for x in dict.fromkeys(m.metric for m in sm) if x != rate]
        table = [
            ["impl", "config", RATES[rate], "vs hand-written"]
            + [collection.METRICS.get(x, x) for x in others]
            + ["note"]
        ]
        for impl in dict.fromkeys(m.impl for m in sm):
            by_metric = {m.metric: m for m in sm if m.impl == impl}
            main = by_metric[rate]
            notes = "; ".join(dict.fromkeys(m.note for m in by_metric.values() if m.note))
            cells = [collection.cell([], by_metric[x]) if x in by_metric else "" for x in others]
            table.append(
                [impl, main.config, collection.cell([], main), vs_hand(ms, main), *cells, notes]
            )
        out[section] = table
    return out


INTRO = (
    'One Ray (`num_cpus=2`) for the whole run, `{"num_cpus": 1}` per worker actor, CartPole-v1 '
    "x64 per worker, 2 workers, the 2x64 MLP, 4096 frames per worker batch. `vs hand-written` "
    "is the row's rate over the hand-written Ray collector's in the same section (>1: faster). "
    "`disabled`: `make_env`'s SyncVectorEnv, auto-reset disabled (the hand-written actors reset "
    "with `reset_mask`); `same_step`: GymWrapper over a SAME_STEP SyncVectorEnv (so do the "
    "hand-written); `next_step`: the factory returns `gym.make_vec(..., vectorization_mode="
    "'sync')` as gymnasium builds it, NEXT_STEP (the hand-written step it, transitions counted); "
    "`next_step_native`: the factory returns `gym.make_vec('CartPole-v1', 64)` (CartPoleVectorEnv,"
    " one call for all copies): both count transitions only (a reset step is none). "
    "`pixels`: 16 envs per worker observing uint8 4x84x84 frames, 2048 frames per batch. "
    "`background`: frames written into a Ray-held RayReplayBuffer per second after a warm-up, "
    "the driver sampling nothing; `background_pixels`: the same with the `pixels` envs. See the "
    "docstring of `benchmarks/fast_paths.py`."
)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "frames measured per collector after the warm-up "
        "batch in disabled and same_step (default 20000, 2000 with --quick; x3, as "
        "collection.py's batched section)", argv,
    )  # fmt: skip
    s = Settings.quick(args.frames) if args.quick else Settings(frames=args.frames or 20_000)
    sections = {"disabled": section_disabled, "same_step": section_same_step,
                "next_step": section_next_step, "next_step_native": section_next_step_native,
                "pixels": section_pixels,
                "background": section_background,
                "background_pixels": section_background_pixels}  # fmt: skip

    def run(rec: Recorder) -> None:
        for section in SECTIONS:
            if section in args.sections:
                sections[section](rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="fast_paths.py", argv=argv,
        intro=INTRO,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
