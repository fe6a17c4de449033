"""``tdscheme bench PRESET``: a preset's collection rate on this machine, beside the limit.

Users of fast RL frameworks often cannot reproduce a published throughput, and
nothing tells them why. This command measures, on the user's own machine and
with the preset's own env, policy and collector settings (every ``train``
option applies):

1. the *bare loop* (:mod:`tdscheme.rollout.bare`): one process stepping the
   preset's env and calling its policy, nothing else: the frames/s one worker
   can at most reach here; times the workers that can run at once (the
   collectors, at most one per CPU Ray has), the *limit*;
2. the preset's ``RayCollector`` (the workers ``tdscheme train`` starts, its
   batches coming to this process), over ``--seconds`` after its first batch;
3. each worker's fast path: ``yes``, or why it runs torchrl's rollout (a slower
   loop, named so that the user can change what makes it so).

It prints a few lines and one ``bench: {...}`` JSON line (the same numbers, for
scripts). No learner step runs: this is the collection side alone.
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["bench", "bench_lines"]


def bench(preset: Any, *, seconds: float) -> dict[str, Any]:
    """Measures ``preset``'s collection (see the module); Ray must be initialized.

    Args:
        preset: a :class:`~tdscheme.presets.Preset`.
        seconds: each measurement's window.

    Returns:
        ``bare_fps`` (one process; ``None`` with ``bare_reason`` when the bare
        loop cannot step the env), ``parallel_workers``, ``limit_fps``,
        ``tdscheme_fps``, ``of_limit`` (tdscheme / limit), ``fast_path`` (per
        worker: ``True`` or the reason), and what ran.
    """
    import ray

    from tdscheme.collectors import RayCollector
    from tdscheme.rollout.bare import bare_loop_rate

    factories = preset.factories()
    learner = factories["learner_factory"](**factories["policy_factory"]())
    env_factory, policy = factories["env_factory"], learner.policy
    bare = bare_loop_rate(env_factory, policy, seconds=seconds)
    scheme = preset.scheme
    config = scheme.collector_config(env_factory, policy)
    frames = 0
    with RayCollector.from_config(config) as collector:
        batches = iter(collector)
        next(batches)  # the workers' start-up and first batch are not counted
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += next(batches).numel()
        elapsed = time.perf_counter() - start
        fast_path = collector.stats(timeout=30)["fast_path"]
    cpus = int(ray.cluster_resources().get("CPU", 1))
    parallel = max(1, min(scheme.num_collectors, cpus))
    rate = frames / elapsed
    limit = None if bare.frames_per_s is None else bare.frames_per_s * parallel
    return {
        "preset": preset.name,
        "env_id": getattr(preset.algo, "env_id", None),
        "num_collectors": scheme.num_collectors,
        "num_envs": getattr(preset.algo, "num_envs", None),
        "frames_per_batch": scheme.frames_per_batch,
        "seconds": seconds,
        "bare_fps": bare.frames_per_s,
        "bare_reason": bare.reason,
        "parallel_workers": parallel,
        "limit_fps": limit,
        "tdscheme_fps": rate,
        "tdscheme_frames": frames,
        "of_limit": None if limit is None else rate / limit,
        "fast_path": fast_path,
    }


def bench_lines(result: dict[str, Any]) -> list[str]:
    """The lines ``tdscheme bench`` prints for :func:`bench`'s result."""
    lines = [
        f"tdscheme bench {result['preset']}: {result['num_collectors']} collectors x "
        f"{result['num_envs']} envs of {result['env_id']}, {result['frames_per_batch']} "
        f"frames per batch, {result['seconds']:g} s per measurement"
    ]
    if result["bare_fps"] is None:
        lines.append(f"  bare loop: not measured ({result['bare_reason']})")
    else:
        lines.append(
            f"  bare loop, one process (env steps + policy calls only): "
            f"{result['bare_fps']:,.0f} frames/s"
        )
        lines.append(
            f"  limit, x{result['parallel_workers']} workers at once: "
            f"{result['limit_fps']:,.0f} frames/s"
        )
    share = "" if result["of_limit"] is None else f" ({result['of_limit']:.2f} of the limit)"
    lines.append(f"  tdscheme RayCollector: {result['tdscheme_fps']:,.0f} frames/s{share}")
    for worker, status in enumerate(result["fast_path"]):
        text = "yes" if status is True else f"no: {status}"
        lines.append(f"  worker {worker} fast path: {text}")
    lines.append("bench: " + json.dumps(result, default=str))
    return lines
