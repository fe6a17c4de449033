"""The modules one batch goes through in ``tdscheme train ppo-cartpole``: counted, not guessed.

docs/ARCHITECTURE.md lists one batch's path; this script measures it. It builds the
``ppo-cartpole`` preset's Trainer (a real Ray, two collector workers), takes one warm-up
step, then records with ``sys.setprofile`` every tdscheme module whose code runs on the
driver during one more training step (the collector's iteration, the flow, the pool, the
replies, the learner's update, the weight push, the metrics and the run log). The
worker's side is measured the same way on a :class:`CollectorWorker` run in this process
(the code an actor runs for one ``collect``). Evaluation and checkpoints are not part of
a batch's path and are not counted.

Run from the repository root (a few seconds)::

    .venv/bin/python benchmarks/tools/batch_path.py

Output: one JSON line (modules and folders on each side, their union), then the modules.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

from harness import json_line
from report import machine_info

from tdscheme.collectors.settings.specs import worker_specs
from tdscheme.presets import get_preset

PACKAGE_PREFIX = "tdscheme."


def traced_modules(call: Callable[[], Any]) -> set[str]:
    """The tdscheme modules whose functions run during ``call()`` (this thread)."""
    seen: set[str] = set()

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith(PACKAGE_PREFIX) and name != "tdscheme.testing":
                seen.add(name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def driver_modules(preset_name: str) -> set[str]:
    """The driver's modules during one training step after a warm-up step."""
    with tempfile.TemporaryDirectory() as run_dir:
        preset = get_preset(preset_name).override(
            {"run_dir": run_dir, "eval_every_frames": 0, "checkpoint_every_frames": 0}
        )
        with preset.build_trainer() as trainer:
            trainer.scheme.step()

            def step() -> None:
                metrics = trainer.scheme.step()
                trainer._log(metrics)

            return traced_modules(step)


def worker_modules(preset_name: str) -> set[str]:
    """A collector worker's modules during one ``collect`` (the actor class, in process)."""
    from tdscheme.collectors import CollectorWorker

    preset = get_preset(preset_name)
    factories = preset.factories()
    learner = factories["learner_factory"](**factories["policy_factory"]())
    config = preset.scheme.collector_config(factories["env_factory"], learner.policy)
    worker = CollectorWorker(0, worker_specs(config)[0])
    try:
        worker.collect(0)
        return traced_modules(lambda: worker.collect(1))
    finally:
        worker.shutdown()


def folder(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else "tdscheme"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="ppo-cartpole", help="the preset whose batch is followed")
    name = parser.parse_args(argv).preset
    driver = driver_modules(name)
    worker = worker_modules(name)
    both = driver | worker
    row = {
        "measure": "batch_path",
        "preset": name,
        "driver_modules": len(driver),
        "worker_modules": len(worker),
        "modules": len(both),
        "folders": len({folder(m) for m in both}),
        "machine": machine_info(),
    }
    json_line(row)
    for side, modules in (("driver", driver), ("worker", worker)):
        print(f"\n{side} ({len(modules)}):")
        for module in sorted(modules):
            print(f"  {module}")


if __name__ == "__main__":
    main()
