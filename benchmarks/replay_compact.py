"""Pixel replay memory: tdscheme's CompactFrameStorage beside torchrl's LazyTensorStorage and compact_obs.

Each workload is collected once by torchrl's own ``Collector`` (random actions) and
written, ``batch.reshape(-1)`` per batch, into a buffer of ``--frames`` transitions (the
last batches wrap around it). Rows per workload:

* ``LazyTensorStorage``: torchrl's storage, each transition with ``observation`` and
  ``("next", "observation")``;
* ``compact_obs``: torchrl's ``Collector(compact_obs=True)`` batches in a
  ``LazyTensorStorage`` (no ``("next", obs)``: torchrl's ``NextStateReconstructor`` rebuilds
  it when sampled, with a placeholder at trajectory ends and slice edges);
* ``CompactFrameStorage``: tdscheme's storage (:mod:`tdscheme.replay.compact`), with
  ``stack_dim=-3`` where the frames are stacked.

Measured: bytes held per stored transition (everything the storage holds, side pools
included, over its capacity), extend and sample throughput (median of ``--repeats`` runs,
the spread beside it), and whether reading the whole buffer gives torchrl's storage's
contents back bit for bit.

Workloads: ``pong`` (EnvPool Pong as the ppo-pong preset builds it: 4 stacked 84x84 grey
frames, 8 envs) and ``synthetic`` (gymnasium's default ``SyncVectorEnv`` of 16 CartPoles
with 4x84x84 uint8 observations, no stacking, NEXT_STEP autoreset).

Run from the repository root: ``.venv/bin/python benchmarks/replay_compact.py [--quick]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from report import Measurement, Recorder, parse_section_args, run_sections
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs.utils import RandomPolicy

from tdscheme.envs import make_atari_env, wrap_gym_env
from tdscheme.envs.faulty import PixelsLikeObs
from tdscheme.replay import CompactFrameStorage

SECTIONS = ("pong", "synthetic")
TITLE = "Pixel replay memory: CompactFrameStorage, LazyTensorStorage, compact_obs"
KINDS = ("LazyTensorStorage", "compact_obs", "CompactFrameStorage")


@dataclass
class Settings:
    capacity: int = 10_000
    batches: int = 12
    repeats: int = 3
    samples: int = 100
    sample_batch: int = 256

    @classmethod
    def make(cls, quick: bool, frames: int | None) -> Settings:
        if quick:
            return cls(capacity=frames or 1_500, batches=2, repeats=1, samples=5)
        return cls(capacity=frames or cls.capacity)


def pong_env() -> Any:
    return make_atari_env("ALE/Pong-v5", num_envs=8, backend="envpool")


def synthetic_env() -> Any:
    def one() -> gym.Env:
        return PixelsLikeObs(gym.make("CartPole-v1"), (4, 84, 84))

    return wrap_gym_env(gym.vector.SyncVectorEnv([one] * 16))


WORKLOADS: dict[str, tuple[Callable[[], Any], int | None]] = {
    "pong": (pong_env, -3),
    "synthetic": (synthetic_env, None),
}


def collect(make: Callable[[], Any], s: Settings, frames_per_batch: int, **kwargs: Any) -> list:
    env = make()
    env.set_seed(0)
    collector = Collector(
        env, RandomPolicy(env.action_spec), frames_per_batch=frames_per_batch,
        total_frames=frames_per_batch * s.batches, **kwargs,
    )  # fmt: skip
    try:
        return [batch.reshape(-1).clone() for batch in collector]
    finally:
        collector.shutdown()


def storage_bytes(storage: Any) -> int:
    if isinstance(storage, CompactFrameStorage):
        return storage.nbytes()
    return int(storage._storage.bytes())


def fill(kind: str, batches: list, s: Settings, stack_dim: int | None) -> tuple[Any, float]:
    """A buffer of ``kind`` with ``batches`` written; and the seconds the writes took."""
    storage = (
        CompactFrameStorage(s.capacity, keys=["observation"], stack_dim=stack_dim)
        if kind == "CompactFrameStorage"
        else LazyTensorStorage(s.capacity)
    )
    rb = TensorDictReplayBuffer(storage=storage, batch_size=s.sample_batch)
    start = time.perf_counter()
    for batch in batches:
        rb.extend(batch)
    return rb, time.perf_counter() - start


def sample_s(rb: Any, s: Settings) -> float:
    start = time.perf_counter()
    for _ in range(s.samples):
        rb.sample()
    return time.perf_counter() - start


def same(a: Any, b: Any) -> bool:
    keys = set(a.keys(True, True))
    if keys != set(b.keys(True, True)):
        return False
    return all(torch.equal(a.get(k), b.get(k)) for k in keys)


def run_workload(rec: Recorder, section: str, s: Settings) -> None:
    make, stack_dim = WORKLOADS[section]
    env = make()
    frames_per_batch = max(1024 // env.batch_size.numel(), 1) * env.batch_size.numel()
    env.close()
    data = {
        "LazyTensorStorage": collect(make, s, frames_per_batch),
        "compact_obs": collect(make, s, frames_per_batch, compact_obs=True),
    }
    data["CompactFrameStorage"] = data["LazyTensorStorage"]
    written = sum(b.shape[0] for b in data["LazyTensorStorage"])
    config = f"{written:,} transitions into {s.capacity:,}; sample {s.sample_batch}"
    reference = None
    for kind in KINDS:
        extend, sample, rb = [], [], None
        for _ in range(s.repeats):
            rb, seconds = fill(kind, data[kind], s, stack_dim)
            extend.append(written / seconds)
            sample.append(s.samples * s.sample_batch / sample_s(rb, s))
        per = storage_bytes(rb.storage) / s.capacity
        rec.add(Measurement(section, kind, "bytes_per_transition", per, "B", config))
        for metric, values in (("extend", extend), ("sample", sample)):
            spread = f"runs {', '.join(f'{v:,.0f}' for v in values)}"
            rec.add(Measurement(section, kind, f"{metric}_per_s", statistics.median(values),
                                "transitions/s", config, spread))  # fmt: skip
        if kind == "LazyTensorStorage":
            reference = rb[:]
        elif kind == "CompactFrameStorage":
            exact = same(reference, rb[:])
            pools = rb.storage.pool_sizes()
            rec.add(Measurement(section, kind, "bit_for_bit", float(exact), "bool", config,
                                f"values kept aside: {pools}"))  # fmt: skip
        del rb


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for m in ms:
        table = out.setdefault(
            m.section, [["impl", "metric", "value", "vs LazyTensorStorage", "note"]]
        )
        base = next((p for p in ms if p.section == m.section and p.metric == m.metric
                     and p.impl == "LazyTensorStorage"), None)  # fmt: skip
        ratio = f"{m.value / base.value:.3f}x" if base and base.value and m.unit != "bool" else ""
        value = (
            "yes"
            if m.unit == "bool" and m.value
            else "no"
            if m.unit == "bool"
            else (f"{m.value:,.0f} {m.unit}")
        )
        table.append([m.impl, m.metric, value, ratio, m.note or m.config])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "the buffer's capacity in transitions", argv
    )
    s = Settings.make(args.quick, args.frames)

    def run(rec: Recorder) -> None:
        for section in args.sections:
            run_workload(rec, section, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="replay_compact.py", argv=argv,
        intro=__doc__.split("\n\n", 1)[1],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
