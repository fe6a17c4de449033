"""What the benchmark scripts share: the machine, JSON lines, their options and their tables.

The scripts run from the repository root as ``python benchmarks/NAME.py``, so this module
is importable as ``report``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium
import ray
import tensordict
import torch
import torchrl


def machine_info() -> dict[str, Any]:
    """The machine, the library versions, the load and the tdscheme commit (``+dirty`` if edited)."""

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
            return out.stdout.strip()
        except OSError:
            return ""

    commit = git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--short") else "")
    return {
        "cpu_count": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "gymnasium": gymnasium.__version__,
        "tdscheme_commit": commit,
    }


def run_process(
    command: list[str],
    what: str,
    *,
    timeout_s: float = 600.0,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[str, float, float]:
    """Runs ``command``; returns its stdout, its start (``time.time()``) and its seconds to exit.

    Raises:
        RuntimeError: it failed, with the end of its stderr.
        subprocess.TimeoutExpired: it ran past ``timeout_s`` (it is killed).
    """
    start = time.time()
    out = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=cwd,
        env=None if env is None else dict(env),
    )  # fmt: skip
    exit_s = time.time() - start
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout, start, exit_s


def train_result(stdout: str, exit_s: float) -> dict[str, Any]:
    """What a ``tdscheme train`` run printed, given the seconds its process took to exit.

    Returns:
        ``frames`` (to the target if reached, else all), ``wall_s`` (the command's own
        "s since the command started" at the target, else ``exit_s``), ``exit_s``,
        ``reached`` and ``eval_return``.
    """
    summary = json.loads(stdout.split("summary: ", 1)[1].splitlines()[0])
    since = re.search(r"([0-9.]+) s since the command started", stdout)
    return {
        "frames": summary["target_frames"] or summary["frames"],
        "wall_s": float(since.group(1)) if since else exit_s,
        "exit_s": exit_s,
        "reached": summary["target_reached"],
        "eval_return": summary["eval_return"],
    }


@dataclass
class Measurement:
    """One JSON line of a section-style script: ``value`` (None: n/a, ``note`` says why) of
    ``metric`` in ``unit`` for ``impl`` in ``section``, under ``config``."""

    section: str
    impl: str
    metric: str
    value: float | None
    unit: str
    config: str = ""
    note: str = ""


class Recorder:
    """Keeps the measurements (dataclasses) and prints each as a JSON line, with the machine."""

    def __init__(self) -> None:
        self.machine = machine_info()
        self.measurements: list[Any] = []

    def add(self, measurement: Any) -> None:
        """Keeps ``measurement`` and prints it as one JSON line."""
        self.measurements.append(measurement)
        print(json.dumps({**asdict(measurement), **self.machine}), flush=True)


def parse_section_args(
    description: str, sections: Sequence[str], frames_help: str, argv: list[str]
) -> argparse.Namespace:
    """The options of a script measured in sections: ``--quick --sections --frames --out``.

    Returns:
        The parsed options, ``sections`` as a list of known section names.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny counts: a smoke test")
    parser.add_argument(
        "--sections",
        default=",".join(sections),
        help=f"comma-separated subset of {','.join(sections)} (default: all)",
    )
    parser.add_argument("--frames", type=int, default=None, help=frames_help)
    parser.add_argument("--out", default=None, help="also write a markdown section to this path")
    args = parser.parse_args(argv)
    args.sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(args.sections) - set(sections))
    if unknown or not args.sections:
        parser.error(f"--sections: unknown {unknown}; accepted: {','.join(sections)}")
    if args.frames is not None and args.frames <= 0:
        parser.error(f"--frames={args.frames}: must be a positive number of frames")
    return args


def print_tables(tables: Mapping[str, list[list[str]]], *, width: int = 60) -> None:
    """Prints each section's table (header row first) in aligned columns of ``width`` characters at most."""
    for section, table in tables.items():
        widths = [max(len(r[i][:width]) for r in table) for i in range(len(table[0]))]
        print(f"\n== {section}")
        for r in table:
            print("  ".join(c[:width].ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def write_markdown(
    path: str,
    *,
    title: str,
    script: str,
    argv: list[str],
    seconds: float,
    machine: Mapping[str, Any],
    intro: str,
    tables: Mapping[str, list[list[str]]],
) -> None:
    """Writes a section for ``benchmarks/results/<topic>.md``: command, machine, ``intro``, tables."""
    command = shlex.join([".venv/bin/python", f"benchmarks/{script}", *argv])
    lines = [
        f"## {title}",
        "",
        f"Command, from the repository root ({seconds:.0f} s): `{command}`",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
        "",
        intro,
    ]
    for section, table in tables.items():
        lines += ["", f"### {section}", ""]
        lines += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
        lines += ["| " + " | ".join(r) + " |" for r in table[1:]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_text_section(path: str, text: str, *, title: str | None = None) -> None:
    """Writes ``text`` (a script's own markdown) under its command line and the machine."""
    with open(path, "w", encoding="utf-8") as f:
        if title:
            f.write(f"## {title}\n\n")
        f.write(f"Command: `{' '.join([sys.executable, *sys.argv])}`\n\n")
        f.write(f"Machine: `{json.dumps(machine_info())}`\n\n{text}\n")


def run_sections(
    run: Callable[[Recorder], None],
    *,
    tables: Callable[[list[Any]], Mapping[str, list[list[str]]]],
    out: str | None,
    title: str,
    script: str,
    argv: list[str],
    intro: Callable[[], str] | str,
    num_cpus: int = 2,
) -> int:
    """The scaffolding of a section-style script: a new local Ray, the sections, the report.

    Sets the driver to one torch thread (Ray gives each actor ``OMP_NUM_THREADS=1``),
    keeps torchrl's INFO lines off stdout, starts a new local Ray on ``num_cpus`` CPUs
    (``address="local"``: even while another Ray runs on the machine), runs
    ``run(recorder)``, shuts Ray down, prints the tables and, with ``out``, writes
    the markdown section.

    Returns:
        The exit status (0).
    """
    torch.set_num_threads(1)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    started = time.perf_counter()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    rec = Recorder()
    try:
        run(rec)
    finally:
        ray.shutdown()
    seconds = time.perf_counter() - started
    print_tables(tables(rec.measurements))
    print(f"\n{len(rec.measurements)} measurements in {seconds:.0f} s", flush=True)
    if out:
        write_markdown(
            out, title=title, script=script, argv=argv, seconds=seconds, machine=rec.machine,
            intro=intro() if callable(intro) else intro, tables=tables(rec.measurements),
        )  # fmt: skip
        print(f"wrote {out}", flush=True)
    return 0
