"""Fault rows of issue 12, section 1: placement (what cannot be placed is a clean error, at once).

Each row is a function returning the dict ``benchmarks/faults.py`` records: a
collector, a scheme or the command asks for what the cluster cannot give (too many
collectors, a worker bigger than a node, a GPU or a resource no node has, CPUs held by
another actor), and must fail with an error naming the option to change. Heavy imports
stay inside the functions.

Run this module's rows without the table runner (one Ray for all, in this process)::

    .venv/bin/python benchmarks/fault_rows/placement.py [substring]
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ holds faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults import row  # noqa: E402

from fault_rows._parts import expect_error, ray_lease, run_rows_here  # noqa: E402

#: the runner's hard limit per row: the bounds plus Ray's start on a loaded machine
TIMEOUT_S = 420.0


def _expect_error(
    fault: str, bound_s: float, build: Callable[[], Any], names: tuple[str, ...]
) -> dict[str, Any]:
    """A row for ``build()`` in a Ray: a ``PlacementError`` naming every word in ``names``."""
    from tdscheme.errors import PlacementError

    with ray_lease():
        return expect_error(fault, build, names=names, bound_s=bound_s, errors=(PlacementError,))


def _cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 1))


def placement_too_many_collectors() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, num_collectors=2 * _cpus() + 2)

    return _expect_error(
        "num_collectors = 2 x cores + 2 (1 CPU each)", 30.0, build,
        ("num_collectors", "--num-collectors", "asked in all", "CPU="),
    )  # fmt: skip


def placement_one_worker_too_big() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, remote_configs={"num_cpus": 1000})

    return _expect_error(
        "remote_configs={'num_cpus': 1000}", 30.0, build,
        ("remote_configs", "collector_resources", "1000", "largest node"),
    )  # fmt: skip


def placement_gpu_on_cpu_cluster() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(make_faulty_env, frames_per_batch=20, remote_configs={"num_gpus": 1})

    return _expect_error(
        "remote_configs={'num_gpus': 1} on a cluster without GPU", 30.0, build,
        ("remote_configs", "GPU"),
    )  # fmt: skip


def placement_custom_resource_missing() -> dict[str, Any]:
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    def build() -> Any:
        return RayCollector(
            make_faulty_env,
            frames_per_batch=20,
            remote_configs={"resources": {"accelerator_tpu": 1}},
        )

    return _expect_error(
        "remote_configs with a resource no node has", 30.0, build, ("accelerator_tpu",)
    )


def placement_pending_past_actor_start_timeout() -> dict[str, Any]:
    import ray

    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    class Placeholder:  # local: pickled by value, whatever imports this module
        def ping(self) -> int:
            return 1

    with ray_lease():
        holder = ray.remote(num_cpus=_cpus())(Placeholder).remote()
        try:
            ray.get(holder.ping.remote(), timeout=300)  # every CPU held before the timer starts
            return _expect_error(
                "every CPU held by another actor, actor_start_timeout_s=3", 30.0,
                lambda: RayCollector(make_faulty_env, frames_per_batch=20, actor_start_timeout_s=3),
                ("actor_start_timeout_s=3", "Free resources"),
            )  # fmt: skip
        finally:
            with contextlib.suppress(Exception):
                ray.kill(holder)


def placement_grad_workers_too_big() -> dict[str, Any]:
    from tdscheme import Scheme
    from tdscheme.presets import get_preset

    def build() -> Any:
        preset = get_preset("a3c-cartpole").override({"grad_worker_resources": {"num_cpus": 1000}})
        return Scheme(**preset.factories(), config=preset.scheme)

    # the arithmetic and the setting that fits (issue 64: added up before any actor starts)
    return _expect_error(
        "grad_worker_resources={'num_cpus': 1000}", 30.0, build,
        ("2000 CPUs asked", "--grad-worker-resources"),
    )  # fmt: skip


def placement_cli_too_many_collectors() -> dict[str, Any]:
    """More collectors than cores and no resources given: since issue 64 the run shares the
    CPUs (one warning, "each takes") and finishes; its own resources that cannot fit are
    refused (:func:`placement_cli_own_resources_too_big`)."""
    cores = os.cpu_count() or 1
    collectors = 1 << cores.bit_length()  # a power of two past the cores (divides the batch)
    proc, seconds = _train(["--num-collectors", str(collectors), "--total-frames", "2000"])
    text = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode == 0 and "each takes" in proc.stderr
    line = next((x for x in text.splitlines() if "each takes" in x), text[-300:])
    return row(
        f"tdscheme train --num-collectors {collectors} on {cores} cores, no resources given",
        "survived" if ok else "wrong result",
        seconds, 120.0, detail=f"exit {proc.returncode}: {line[:300]}",
    )  # fmt: skip


def placement_cli_own_resources_too_big() -> dict[str, Any]:
    """The user's own resources that the Ray tdscheme starts cannot hold: refused with the
    arithmetic and the settings that fit, before any actor starts, not a timeout later."""
    cores = os.cpu_count() or 1
    collectors = 1 << cores.bit_length()
    proc, seconds = _train([
        "--num-collectors", str(collectors), "--collector-resources", '{"num_cpus": 1}',
        "--total-frames", "2000",
    ])  # fmt: skip
    text = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode != 0 and "CPUs asked" in text and "--collector-resources" in text
    line = next((x for x in text.splitlines() if "CPUs asked" in x), text[-300:])
    return row(
        f"tdscheme train --num-collectors {collectors} --collector-resources "
        f"'{{\"num_cpus\": 1}}' on {cores} cores",
        "clean error" if ok else "wrong result",
        seconds, 60.0, detail=f"exit {proc.returncode}: {line[:300]}",
    )  # fmt: skip


def _train(args: list[str]) -> tuple[Any, float]:
    """``tdscheme train ppo-cartpole ARGS`` in a temporary run directory; (process, seconds)."""
    import subprocess

    start = time.perf_counter()
    command = [os.path.join(os.path.dirname(sys.executable), "tdscheme"), "train", "ppo-cartpole"]
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(
            [*command, *args, "--run-dir", d], capture_output=True, text=True, timeout=300
        )
    return proc, time.perf_counter() - start


ROWS: list[tuple[str, Callable[[], dict]]] = [
    (fn.__name__, fn)
    for fn in (
        placement_too_many_collectors,
        placement_one_worker_too_big,
        placement_gpu_on_cpu_cluster,
        placement_custom_resource_missing,
        placement_pending_past_actor_start_timeout,
        placement_grad_workers_too_big,
        placement_cli_too_many_collectors,
        placement_cli_own_resources_too_big,
    )
]


if __name__ == "__main__":
    run_rows_here(ROWS)
