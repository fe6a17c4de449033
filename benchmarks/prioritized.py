"""Prioritized replay: the sampler's speed, and DQN on CartPole with and without it.

Sections:

* ``sampler``: one ``sample`` of 512 frames and one ``update_tensordict_priority`` of
  them, from a ``TensorDictReplayBuffer`` holding 1,000,000 frames (4 floats each): tdscheme's
  ``SumTreeSampler`` (a numpy sum tree), torchrl's ``PrioritizedSampler`` (its C++ trees;
  n/a where its extension does not load with the installed torch) and torchrl's uniform
  ``RandomSampler`` (whose update does nothing), measured in turn, 5 rounds of 200 calls
  each after a warm-up round; the median of the rounds and their spread;
* ``shards``: a ``ShardedReplayBuffer`` of 1, 2 and 4 shards (100,000 CartPole-sized frames
  in all): frames written per second from the driver (batches of 1,024 with their
  priorities, round-robin over the shards), and frames sampled per second by a learner
  drawing minibatches of 128 and writing their priorities back; 3 rounds, the median;
* ``learning``: ``tdscheme train dqn-cartpole`` to its target (475) without and with
  ``--prioritized``, and ``tdscheme train apex-dqn-cartpole`` (Ape-X's sharded replay,
  worker-computed priorities, per-worker epsilons, dueling head), seed by seed (the runs of
  a seed one after the other, in alternating order): frames and seconds to the target,
  median and spread over the seeds; beside them SB3's DQN with the RL Zoo's CartPole-v1 entry
  (``--kinds``: which of uniform, prioritized, apex, sb3-dqn; the ``peers`` extra for SB3).

Run from the repository root: ``.venv/bin/python benchmarks/prioritized.py [--quick]``
(``--sections sampler`` alone takes under a minute; ``learning`` ~2-3 min a run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from harness import in_turn, tdscheme_executable, turn_order
from report import (
    Measurement,
    Recorder,
    parse_section_args,
    run_process,
    run_sections,
    train_result,
)
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer

from tdscheme.replay.prioritized import SumTreeSampler, extension_loads

SECTIONS = ("sampler", "shards", "learning")
TITLE = "Prioritized replay"
SAMPLERS = ("SumTreeSampler", "PrioritizedSampler", "RandomSampler")


@dataclass
class Settings:
    """What one run measures."""

    capacity: int = 1_000_000
    batch: int = 512
    calls: int = 200
    rounds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    total_frames: int = 100_000
    kinds: tuple[str, ...] = ("uniform", "prioritized", "apex", "sb3-dqn")

    @classmethod
    def make(cls, quick: bool, frames: int | None) -> Settings:
        s = (
            cls(capacity=100_000, calls=50, rounds=3, seeds=(0,), total_frames=4_096)
            if quick
            else cls()
        )
        if frames is not None:
            s.capacity = frames
        return s


def filled_buffer(sampler: Any, capacity: int) -> TensorDictReplayBuffer:
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler)
    chunk = min(capacity, 100_000)
    for start in range(0, capacity, chunk):
        buffer.extend(
            TensorDict(
                {"obs": torch.zeros(min(chunk, capacity - start), 4)},
                [min(chunk, capacity - start)],
            )
        )
    return buffer


def sampler_section(rec: Recorder, s: Settings) -> None:
    config = f"{s.capacity:,} frames, batches of {s.batch}, {s.calls} calls a round"
    makers = {
        "SumTreeSampler": lambda: SumTreeSampler(s.capacity, alpha=0.6, beta=0.4),
        "RandomSampler": RandomSampler,
    }
    if extension_loads():
        from torchrl.data import PrioritizedSampler

        makers["PrioritizedSampler"] = lambda: PrioritizedSampler(s.capacity, alpha=0.6, beta=0.4)
    else:
        rec.add(Measurement("sampler", "PrioritizedSampler", "us_per_sample_and_update", None, "us",
                            config, "n/a: torchrl's C++ extension does not load with this torch"))  # fmt: skip
    buffers = {name: filled_buffer(make(), s.capacity) for name, make in makers.items()}
    generator = torch.Generator().manual_seed(0)

    def measure(name: str) -> float:
        buffer = buffers[name]
        start = time.perf_counter()
        for _ in range(s.calls):
            sample = buffer.sample(s.batch)
            sample["td_error"] = torch.rand(s.batch, generator=generator)
            buffer.update_tensordict_priority(sample)
        return 1e6 * (time.perf_counter() - start) / s.calls

    values = in_turn(
        {name: (lambda n=name: measure(n)) for name in buffers}, repeats=s.rounds, alternate=True
    )
    for name, runs in values.items():
        spread = f"rounds {', '.join(f'{v:,.0f}' for v in runs)}"
        rec.add(Measurement("sampler", name, "us_per_sample_and_update", statistics.median(runs),
                            "us", config, spread))  # fmt: skip


def cartpole_frames(count: int) -> TensorDict:
    """``count`` frames shaped as CartPole's (4 floats each way, reward, flags) with priorities."""
    return TensorDict(
        {"observation": torch.rand(count, 4), "action": torch.zeros(count, 2, dtype=torch.long),
         "td_error": torch.rand(count),
         "next": {"observation": torch.rand(count, 4), "reward": torch.ones(count, 1),
                  "done": torch.zeros(count, 1, dtype=torch.bool),
                  "terminated": torch.zeros(count, 1, dtype=torch.bool)}},
        [count],
    )  # fmt: skip


def shards_section(rec: Recorder, s: Settings) -> None:
    from tdscheme.replay.sharded import ShardedReplayBuffer

    frames, write, minibatch = 100_000, 1024, 128
    batches = s.calls // 4 if s.calls < 200 else 100
    for k in (1, 2, 4):
        config = (
            f"{k} shard(s), {frames:,} frames in all; writes of {write}, minibatches of {minibatch}"
        )
        with ShardedReplayBuffer(
            num_shards=k, frames_per_shard=frames // k, batch_size=minibatch, seed=0
        ) as buffer:
            data = cartpole_frames(write)

            def writes(buffer: Any = buffer, data: TensorDict = data) -> float:
                start = time.perf_counter()
                for _ in range(batches):
                    buffer.extend(data)
                return batches * write / (time.perf_counter() - start)

            def samples(buffer: Any = buffer) -> float:
                start = time.perf_counter()
                for _ in range(batches * 4):
                    sample = buffer.sample()
                    sample["td_error"] = torch.rand(minibatch)
                    buffer.update_tensordict_priority(sample)
                buffer.flush()
                return batches * 4 * minibatch / (time.perf_counter() - start)

            values = in_turn({"write": writes, "sample": samples}, repeats=3)
        for metric, runs in values.items():
            rec.add(Measurement("shards", f"{k} shard(s)", f"{metric}_frames_per_s", statistics.median(runs),
                                "frames/s", config, f"rounds {', '.join(f'{v:,.0f}' for v in runs)}"))  # fmt: skip


def sb3_dqn(seed: int, budget: int) -> dict[str, Any]:
    """SB3's DQN with the RL Zoo's CartPole-v1 entry, evaluated as the presets are (every 10,240
    steps, 10 episodes), stopped at 475: through ``learning_peers.py sb3`` in its own process."""
    from learning_peers import Sb3Spec, read_curve

    with tempfile.TemporaryDirectory() as d:
        spec = Sb3Spec(
            algo="dqn", env_id="CartPole-v1", zoo_key="CartPole-v1", seed=seed,
            budget_steps=budget, eval_every_steps=10_240, eval_episodes=10, eval_num_envs=1,
            target_return=475.0, stop_at_target=True, curve_path=f"{d}/curve.jsonl",
            torch_threads=1,
        )  # fmt: skip
        Path(f"{d}/spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
        script = str(Path(__file__).resolve().parent / "learning_peers.py")
        _, _, exit_s = run_process([sys.executable, script, "sb3", f"{d}/spec.json"],
                                   f"SB3 DQN seed {seed}", timeout_s=1800)  # fmt: skip
        evals = read_curve(spec.curve_path)["eval"]
    hit = next(((steps, wall) for steps, wall, ret in evals if ret >= 475.0), None)
    return {
        "frames": hit[0] if hit else budget, "wall_s": hit[1] if hit else exit_s,
        "reached": hit is not None, "eval_return": evals[-1][2] if evals else float("nan"),
    }


def learning_section(rec: Recorder, s: Settings) -> None:
    config = f"CartPole, target 475, at most {s.total_frames:,} frames"
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in s.kinds}
    for i, seed in enumerate(s.seeds):
        for kind in turn_order(list(runs), i):
            if kind == "sb3-dqn":
                result = sb3_dqn(seed, s.total_frames)
                runs[kind].append(result)
                rec.add(Measurement("learning", kind, f"frames_to_475_seed{seed}",
                                    result["frames"] if result["reached"] else None, "frames",
                                    config, f"reached={result['reached']}, {result['wall_s']:.0f} s"))  # fmt: skip
                continue
            with tempfile.TemporaryDirectory() as d:
                preset = "apex-dqn-cartpole" if kind == "apex" else "dqn-cartpole"
                command = [tdscheme_executable(), "train", preset, "--seed", str(seed),
                           "--total-frames", str(s.total_frames), "--progress", "False", "--run-dir", f"{d}/run"]  # fmt: skip
                if kind == "prioritized":
                    command.append("--prioritized")
                stdout, _, exit_s = run_process(
                    command, f"dqn-cartpole {kind} seed {seed}", timeout_s=1800
                )
                result = train_result(stdout, exit_s)
            runs[kind].append(result)
            rec.add(Measurement("learning", kind, f"frames_to_475_seed{seed}",
                                result["frames"] if result["reached"] else None, "frames", config,
                                f"reached={result['reached']}, {result['wall_s']:.0f} s, eval {result['eval_return']:.0f}"))  # fmt: skip
    for kind, results in runs.items():
        reached = [r for r in results if r["reached"]]
        frames = [r["frames"] for r in reached]
        note = (
            f"{len(reached)}/{len(results)} reached; frames {', '.join(f'{f:,}' for f in frames)}"
        )
        rec.add(Measurement("learning", kind, "median_frames_to_475",
                            statistics.median(frames) if frames else None, "frames", config, note))  # fmt: skip
        seconds = [r["wall_s"] for r in reached]
        rec.add(Measurement("learning", kind, "median_s_to_475",
                            statistics.median(seconds) if seconds else None, "s", config,
                            f"runs {', '.join(f'{x:.0f}' for x in seconds)}"))  # fmt: skip


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for m in ms:
        table = out.setdefault(m.section, [["impl", "metric", "value", "vs first", "note"]])
        first = next((p for p in ms if p.section == m.section and p.metric == m.metric
                      and p.value), None)  # fmt: skip
        ratio = f"{m.value / first.value:.2f}x" if m.value and first else ""
        value = "n/a" if m.value is None else f"{m.value:,.1f} {m.unit}"
        table.append([m.impl, m.metric, value, ratio, m.note or m.config])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--kinds", default=None, help="learning: comma-separated runs to make")
    extra.add_argument("--seeds", default=None, help="learning: comma-separated seeds")
    own, rest = extra.parse_known_args(argv)
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "the sampler section's buffer size", rest
    )
    s = Settings.make(args.quick, args.frames)
    if own.kinds:
        s.kinds = tuple(k.strip() for k in own.kinds.split(",") if k.strip())
    if own.seeds:
        s.seeds = tuple(int(x) for x in own.seeds.split(","))

    def run(rec: Recorder) -> None:
        if "sampler" in args.sections:
            sampler_section(rec, s)
        if "shards" in args.sections:
            shards_section(rec, s)
        if "learning" in args.sections:
            learning_section(rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="prioritized.py", argv=argv,
        intro=__doc__.split("\n\n", 1)[1],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
