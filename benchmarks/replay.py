"""Background collection into a Ray-held replay buffer: tdscheme vs torchrl's RayCollector.

Both peers get the same envs (CartPole, ``num_envs`` batched copies per worker), the
same deterministic MLP policy, the same torchrl ``RayReplayBuffer`` (LazyTensorStorage)
and 2 collectors of half a CPU each; each runs ``RayCollector(replay_buffer=...)`` plus
``start()`` while the driver samples minibatches from the buffer as a learner would.

Sections:

* ``background``: frames written per second (the buffer's ``write_count`` in frames) over a
  window after warm-up, and the consumer's samples per second meanwhile;
* ``overshoot``: ``total_frames`` that is not a multiple of ``frames_per_batch``,
  collected to the end: frames written past ``total_frames``;
* ``buffer``: ``extend`` and ``sample`` throughput of a local and a Ray-held buffer.

Run from the repository root: ``.venv/bin/python benchmarks/replay.py [--quick]``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from harness import wait_until
from peers import mlp_policy  # benchmarks/peers.py, next to this script (Ray workers see it too)
from report import Measurement, Recorder, parse_section_args, run_sections
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.replay.ray_held import BufferWriter

SECTIONS = ("background", "overshoot", "buffer")
TITLE = "Background collection into a Ray-held replay buffer"
REMOTE = {"num_cpus": 0.5}


@dataclass
class Settings:
    """What one run measures."""

    num_envs: int = 16
    frames_per_batch: int = 1024
    warmup_s: float = 10.0
    window_s: float = 30.0
    sample_batch: int = 256
    overshoot_totals: tuple[int, ...] = (5_000, 10_000)
    buffer_frames: int = 100_000

    @classmethod
    def quick(cls, frames: int | None) -> Settings:
        """Short windows: a smoke test."""
        del frames
        return cls(warmup_s=4.0, window_s=5.0, overshoot_totals=(2_500,), buffer_frames=10_000)


def ray_buffer(capacity: int, row: int = 1) -> RayReplayBuffer:
    """A Ray-held buffer of ``capacity`` frames, stored in rows of ``row`` frames.

    A storage's capacity counts rows: both collectors write a batched env's batch as
    ``[num_envs, time]``, rows of ``time`` frames. (Sized in rows by mistake, a
    million-row storage of 64-frame rows is gigabytes, and its first write takes
    over a minute for either collector.)
    """
    return RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, max(1, capacity // row)),
        batch_size=256,
        remote_config={"num_cpus": 0},
    )


def frames_written(buffer: Any) -> int:
    """Frames in the buffer's writes: rows written times the frames in a row.

    Both collectors write a batched env's batch as ``[num_envs, time]``, so a row
    (what ``write_count`` counts) holds ``time`` frames.
    """
    rows = buffer.write_count
    return rows * buffer[:1].numel() if rows else 0


def write_rate(
    buffer: Any, *, first_frames: int, warmup_s: float, window_s: float, sample_batch: int = 0
) -> tuple[float, float]:
    """Frames written per second into ``buffer`` by collectors running in the background.

    Waits (up to 120 s) until ``first_frames`` frames are written, then ``warmup_s``, then
    counts the frames written over ``window_s`` while the driver samples batches of
    ``sample_batch`` frames as a learner would (``0``: it samples nothing, it sleeps).

    Returns:
        Frames written per second and the driver's samples per second over the window.
    """
    wait_until(lambda: frames_written(buffer) >= first_frames, 120.0)
    time.sleep(warmup_s)
    start_frames, start = frames_written(buffer), time.perf_counter()
    samples = 0
    while sample_batch and time.perf_counter() - start < window_s:
        buffer.sample(sample_batch)
        samples += 1
    if not sample_batch:
        time.sleep(window_s)
    elapsed = time.perf_counter() - start
    return (frames_written(buffer) - start_frames) / elapsed, samples / elapsed


def build(impl: str, buffer: Any, s: Settings, total_frames: int) -> Any:
    env = functools.partial(make_env, "CartPole-v1", num_envs=s.num_envs)
    kwargs = dict(
        frames_per_batch=s.frames_per_batch, total_frames=total_frames, num_collectors=2,
        remote_configs=REMOTE, replay_buffer=buffer,
    )  # fmt: skip
    if impl == "tdscheme":
        return RayCollector(env, mlp_policy(4, 2), **kwargs)
    from torchrl.collectors.distributed import RayCollector as TorchrlRayCollector

    return TorchrlRayCollector(env, mlp_policy(4, 2), **kwargs)


def stop(impl: str, collector: Any) -> None:
    if impl == "tdscheme":
        collector.shutdown()
    else:  # torchrl: stop the thread, then the actors (its documented order)
        import asyncio

        asyncio.run(collector.async_shutdown())


def section_background(rec: Recorder, s: Settings) -> None:
    config = f"CartPole x{s.num_envs} per worker, 2 workers, fpb={s.frames_per_batch}"
    for impl in ("tdscheme", "torchrl"):
        buffer = ray_buffer(1_000_000, row=s.frames_per_batch // s.num_envs)
        collector = build(impl, buffer, s, total_frames=2**40)
        try:
            collector.start()
            fps, samples_per_s = write_rate(
                buffer, first_frames=s.frames_per_batch, warmup_s=s.warmup_s,
                window_s=s.window_s, sample_batch=s.sample_batch,
            )  # fmt: skip
            rec.add(
                Measurement("background", impl, "frames_written_per_s", fps, "frames/s", config)
            )
            rec.add(Measurement("background", impl, "samples_per_s", samples_per_s, "1/s",
                                config, f"batches of {s.sample_batch}"))  # fmt: skip
        finally:
            stop(impl, collector)
            buffer.shutdown()


def section_overshoot(rec: Recorder, s: Settings) -> None:
    for total in s.overshoot_totals:
        config = f"total_frames={total}, fpb={s.frames_per_batch}, 2 workers"
        for impl in ("tdscheme", "torchrl"):
            buffer = ray_buffer(4 * total, row=s.frames_per_batch // s.num_envs)
            collector = build(impl, buffer, s, total_frames=total)
            try:
                for _ in collector:
                    pass
                time.sleep(1.0)  # let any write still in flight land
                rec.add(Measurement("overshoot", impl, "frames_past_total",
                                    float(frames_written(buffer) - total), "frames", config))  # fmt: skip
            finally:
                stop(impl, collector)
                buffer.shutdown()


def section_buffer(rec: Recorder, s: Settings) -> None:
    data = TensorDict(
        {"observation": torch.randn(s.buffer_frames, 4), "action": torch.zeros(s.buffer_frames, 2),
         "next": {"reward": torch.ones(s.buffer_frames, 1)}}, [s.buffer_frames],
    )  # fmt: skip
    chunk = 1024
    # separate batches, as workers send (a slice would pickle the whole storage it views)
    parts = [data[i : i + chunk].clone() for i in range(0, s.buffer_frames, chunk)]
    makers: dict[str, Callable[[], Any]] = {
        "local": lambda: ReplayBuffer(storage=LazyTensorStorage(s.buffer_frames), batch_size=256),
        "ray-held": lambda: ray_buffer(s.buffer_frames),
        "ray-held, tdscheme's writer": lambda: ray_buffer(s.buffer_frames),
    }
    for kind, make in makers.items():
        buffer = make()
        # what a tdscheme worker writes with: the codec, decoded in the buffer's actor
        writer = BufferWriter(buffer.client()) if "writer" in kind else buffer
        try:
            writer.extend(parts[0])  # warm-up: storage allocated, the actor's imports done
            start = time.perf_counter()
            for part in parts:
                writer.extend(part)
            extend_fps = s.buffer_frames / (time.perf_counter() - start)
            start, n = time.perf_counter(), 200
            for _ in range(n):
                buffer.sample(256)
            sample_fps = n * 256 / (time.perf_counter() - start)
            config = f"extend {chunk} frames per call, sample 256"
            rec.add(
                Measurement("buffer", kind, "extend_frames_per_s", extend_fps, "frames/s", config)
            )
            rec.add(
                Measurement("buffer", kind, "sample_frames_per_s", sample_fps, "frames/s", config)
            )
        finally:
            if kind != "local":
                buffer.shutdown()


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for m in ms:
        table = out.setdefault(m.section, [["impl", "metric", "value", "config", "note"]])
        value = "n/a" if m.value is None else f"{m.value:,.1f} {m.unit}"
        ratio = ""
        if m.impl == "tdscheme":
            peer = next((p for p in ms if p.section == m.section and p.impl == "torchrl"
                         and p.metric == m.metric and p.config == m.config), None)  # fmt: skip
            if peer and peer.value and m.value is not None and m.section == "background":
                ratio = f" ({m.value / peer.value:.2f}x torchrl)"
        table.append([m.impl, m.metric, value + ratio, m.config, m.note])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "unused (windows are in seconds)", argv
    )
    s = Settings.quick(args.frames) if args.quick else Settings()
    sections = {"background": section_background, "overshoot": section_overshoot,
                "buffer": section_buffer}  # fmt: skip

    def run(rec: Recorder) -> None:
        for section in args.sections:
            sections[section](rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="replay.py", argv=argv,
        intro=__doc__.split("\n\n", 1)[1],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
