"""The fault table (issue 12): every fault row, each in its own subprocess with a hard timeout.

A row is a function in a module of ``benchmarks/fault_rows/``; each module has::

    ROWS: list[tuple[str, Callable[[], dict]]]

and each function injects one fault into a real training run (real Ray, real envs)
and returns::

    {"fault": str, "outcome": "survived" | "clean error" | "hang" | "wrong result",
     "seconds": float, "bound_s": float, "ledger": "balanced" | "unbalanced" | "n/a",
     "detail": str}

``seconds`` is the time to recovery or to the error, ``bound_s`` the bound the row
promises. Row modules import torch, Ray and tdscheme inside their functions, so
that listing the rows is cheap. A module may set ``TIMEOUT_S`` (the hard timeout of
each of its rows, default ``--timeout-s``), and a function may carry its own
``timeout_s`` attribute.

Each row runs in a fresh Python process (its own session and process group, its
own ``RAY_TMPDIR``), so one row's Ray, threads or signal handlers cannot touch the
next. A row that does not finish within its hard timeout is recorded as ``"hang"``
(its process group is killed) and the table goes on; a row whose process dies
without a result is ``"wrong result"`` with the end of its output as the detail.
A row meets the target when its outcome is ``survived`` or ``clean error``, within
``bound_s``, and its ledger is not ``unbalanced``.

Run from the repository root::

    .venv/bin/python benchmarks/faults.py                    # every row
    .venv/bin/python benchmarks/faults.py --only nan         # rows whose module:name has "nan"
    .venv/bin/python benchmarks/faults.py --list
    .venv/bin/python benchmarks/faults.py --out faults.md    # also write the markdown table

Output: one JSON line per row on stdout (with the machine and versions), then a table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import fresh_ray_env, json_line

HERE = Path(__file__).resolve().parent
ROWS_PACKAGE = "fault_rows"
OUTCOMES = ("survived", "clean error", "hang", "wrong result")
LEDGERS = ("balanced", "unbalanced", "n/a")
DEFAULT_TIMEOUT_S = 240.0


def discover(only: str | None = None) -> list[tuple[str, str, float | None]]:
    """``(module, row name, hard timeout or None)`` of every row, in file order.

    Args:
        only: keep the rows whose ``module:name`` contains this substring
            (case-insensitive).
    """
    sys.path.insert(0, str(HERE))
    found = []
    for path in sorted((HERE / ROWS_PACKAGE).glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"{ROWS_PACKAGE}.{path.stem}"
        module = importlib.import_module(name)
        module_timeout = getattr(module, "TIMEOUT_S", None)
        for row_name, fn in module.ROWS:
            label = f"{path.stem}:{row_name}"
            if only and only.lower() not in label.lower():
                continue
            found.append((name, row_name, getattr(fn, "timeout_s", module_timeout)))
    return found


def run_row_here(module_name: str, row_name: str, result_file: str) -> int:
    """In the child: runs one row and writes its result dict as JSON to ``result_file``."""
    sys.path.insert(0, str(HERE))
    module = importlib.import_module(module_name)
    fn = dict(module.ROWS)[row_name]
    start = time.perf_counter()
    try:
        result = dict(fn())
    except BaseException as err:  # noqa: BLE001 - the row's harness itself failed
        result = {
            "fault": row_name,
            "outcome": "wrong result",
            "seconds": time.perf_counter() - start,
            "bound_s": float("nan"),
            "ledger": "n/a",
            "detail": f"the row raised {type(err).__name__}: {err}\n{traceback.format_exc()}"[
                -2000:
            ],
        }
    Path(result_file).write_text(json.dumps(result, default=str), encoding="utf-8")
    return 0


def run_row(module_name: str, row_name: str, timeout_s: float) -> dict[str, Any]:
    """Runs one row in a subprocess (own session, own RAY_TMPDIR); returns its result."""
    workdir = Path(tempfile.mkdtemp(prefix="tdscheme-fault-"))
    result_file = workdir / "result.json"
    env = fresh_ray_env(workdir / "ray", TMPDIR=str(workdir))
    (workdir / "ray").mkdir()
    command = [sys.executable, str(Path(__file__).resolve()), "--run-row", module_name, row_name]
    command += ["--result-file", str(result_file)]
    start = time.perf_counter()
    with open(workdir / "output.txt", "wb") as output:
        proc = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            cwd=HERE.parent,
        )  # fmt: skip
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
    elapsed = time.perf_counter() - start
    tail = (workdir / "output.txt").read_text(encoding="utf-8", errors="replace")[-1500:]
    if timed_out:
        result = {
            "fault": row_name, "outcome": "hang", "seconds": elapsed, "bound_s": float("nan"),
            "ledger": "n/a", "detail": f"no result within the hard timeout of {timeout_s:.0f} s",
        }  # fmt: skip
    elif result_file.is_file():
        result = json.loads(result_file.read_text(encoding="utf-8"))
    else:
        result = {
            "fault": row_name, "outcome": "wrong result", "seconds": elapsed,
            "bound_s": float("nan"), "ledger": "n/a",
            "detail": f"the row's process exited with {proc.returncode} and no result: {tail}",
        }  # fmt: skip
    _kill_group(proc)  # whatever the row left in its group (its own Ray's helpers)
    shutil.rmtree(workdir, ignore_errors=True)
    return _checked(result, row_name)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _checked(result: dict[str, Any], row_name: str) -> dict[str, Any]:
    """Fills the fields a row left out and says whether it meets the target."""
    result.setdefault("fault", row_name)
    result.setdefault("detail", "")
    result.setdefault("ledger", "n/a")
    if result.get("outcome") not in OUTCOMES:
        result["detail"] = f"unknown outcome {result.get('outcome')!r}; {result['detail']}"
        result["outcome"] = "wrong result"
    if result["ledger"] not in LEDGERS:
        result["ledger"] = "unbalanced"
    seconds, bound = float(result.get("seconds", float("nan"))), float(result.get("bound_s", 0))
    result["seconds"], result["bound_s"] = seconds, bound
    result["ok"] = (
        result["outcome"] in ("survived", "clean error")
        and seconds <= bound
        and result["ledger"] != "unbalanced"
    )
    return result


def versions() -> dict[str, Any]:
    """The machine and the versions that matter, read without importing torch here."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {"machine": platform.node(), "cpus": os.cpu_count()}
    for package in ("torch", "ray", "torchrl", "tensordict", "tdscheme"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    found["load_avg_1m"] = os.getloadavg()[0]
    return found


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the results."""
    lines = [
        "| row | fault | outcome | seconds | bound (s) | ledger | target met | detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        detail = " ".join(str(r["detail"]).split())[:160].replace("|", "\\|")
        lines.append(
            f"| {r['row']} | {r['fault']} | {r['outcome']} | {r['seconds']:.1f} | "
            f"{r['bound_s']:g} | {r['ledger']} | {'yes' if r['ok'] else '**no**'} | {detail} |"
        )
    met = sum(r["ok"] for r in rows)
    lines.append("")
    lines.append(f"{met} / {len(rows)} rows met the target.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="rows whose module:name contains this (case-insensitive)")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"hard timeout of a row (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--run-row", nargs=2, metavar=("MODULE", "ROW"), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_row:
        return run_row_here(*args.run_row, args.result_file)
    rows = discover(args.only)
    if args.list:
        for module, name, timeout in rows:
            print(
                f"{module.split('.')[-1]}:{name}" + (f" (timeout {timeout:g} s)" if timeout else "")
            )
        return 0
    if not rows:
        print(f"no row matches --only {args.only!r}", file=sys.stderr)
        return 2
    env = versions()
    results = []
    for module, name, timeout in rows:
        result = run_row(module, name, timeout or args.timeout_s)
        result["row"] = f"{module.split('.')[-1]}:{name}"
        results.append(result)
        json_line({**result, **env})
    print()
    text = table(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if all(r["ok"] for r in results) else 1


def row(
    fault: str,
    outcome: str,
    seconds: float,
    bound_s: float,
    *,
    ledger: str = "n/a",
    detail: str = "",
) -> dict[str, Any]:
    """A row's result dict (a helper for row modules: ``from faults import row``)."""
    return {
        "fault": fault, "outcome": outcome, "seconds": seconds, "bound_s": bound_s,
        "ledger": ledger, "detail": detail,
    }  # fmt: skip


RowFn = Callable[[], dict[str, Any]]

if __name__ == "__main__":
    sys.exit(main())
