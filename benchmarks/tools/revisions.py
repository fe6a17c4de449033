"""Revisions: the working tree against an earlier revision, in the same run.

``--base REV`` is checked out with ``git worktree add`` into a temporary
directory; the working tree this script lives in is the head. Both run under
this venv (the dependencies are the same) with ``PYTHONPATH`` and the working
directory set to their own checkout: Ray workers put the driver's working
directory first on their ``sys.path``, and a ``sitecustomize`` (on that path)
drops the venv's editable-install finder, which would otherwise resolve a
module missing from the base checkout in the installed tree. A probe per side
asserts that the driver and a Ray worker import ``tdscheme`` from its checkout.

Sections (``--sections``): ``collection`` runs each side's own
``benchmarks/collection.py`` with ``--collection-args`` (torchrl's rows are a
control: they should not move); ``train`` runs ``tdscheme train ppo-cartpole
--seed S`` as ``python -c "from tdscheme.cli import main; ..."`` (the entry
point's module may move) and takes the seconds from the command's start to
its evaluation reaching 475 (the command prints them; the process exit if not
reached). Runs alternate head/base, base/head, ... (ABBA) to spread drift.
Run from the repository root::

    .venv/bin/python benchmarks/tools/revisions.py --base main --repeats 2 --seeds 0,1,2
    .venv/bin/python benchmarks/tools/revisions.py --base HEAD~3 --quick --repeats 1  # smoke test

Output: one JSON line per measurement, then a table of per-side medians and
head/base ratios (frames/s: >1 is faster; seconds: <1 is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

from harness import fresh_ray_env, reap_children, stderr_log, turn_order
from report import Recorder, print_tables, run_process, train_result, write_markdown

SECTIONS = ("collection", "train")
COLLECTION_ARGS = ("--sections same --frames 5000", "--quick --sections same")  # normal, quick
TRAIN_ARGS = ("", "--total-frames 8192 --target-return 10000 --eval-every-frames 4096")
# tdscheme/cli.py's main, or tdscheme/cli/main.py's whether or not the package re-exports it
TRAIN_ENTRY = "import sys; from tdscheme.cli import main; sys.exit(getattr(main, 'main', main)())"
SITECUSTOMIZE = """import sys  # written by benchmarks/tools/revisions.py: no editable-install finder
sys.meta_path[:] = [f for f in sys.meta_path
                    if not getattr(f, "__module__", "").startswith("__editable___tdscheme")]
"""
PROBE = """import json, sys, ray
def where():  # the imported (here preloaded) tdscheme, and where sys.path finds it now
    import sys, tdscheme
    from importlib.machinery import PathFinder
    finders = [f for f in sys.meta_path if "__editable__" in getattr(f, "__module__", "")]
    return {"tdscheme": tdscheme.__file__, "on_path": PathFinder.find_spec("tdscheme").origin,
            "editable_finders": len(finders)}
import torchrl  # noqa: F401 (warms the venv's heavy imports before the first timed run)
from tdscheme.cli import main  # tdscheme train's Ray has its workers preload tdscheme
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
         _system_config={"preload_python_modules": ["tdscheme"]})
try:
    worker = ray.get(ray.remote(where).remote(), timeout=300)
finally:
    ray.shutdown()
cli = sys.modules[getattr(main, "main", main).__module__].__file__
print(json.dumps({"driver": where(), "worker": worker, "cli": cli}))
"""


log = stderr_log("revisions")


@dataclass
class Side:
    """One side of the comparison: a checkout and the environment its processes get."""

    name: str
    rev: str
    root: Path
    env: dict[str, str]

    def run(self, args: list[str], what: str, timeout_s: float) -> tuple[str, float, float]:
        """Runs ``python ARGS`` in this checkout; returns stdout, start time and seconds."""
        try:
            return run_process([sys.executable, *args], f"{self.name}: {what}",
                               timeout_s=timeout_s, cwd=self.root, env=self.env)  # fmt: skip
        finally:
            reap_children()


@dataclass
class Measurement:
    """One JSON line: ``value`` of ``metric`` for ``case`` on one side, in one repeat."""

    section: str
    side: str
    rev: str
    case: str
    metric: str
    value: float
    unit: str
    repeat: int
    seed: int | None = None


def git(root: Path, *args: str) -> str:
    """The output of ``git ARGS`` in ``root``, stripped; raises CalledProcessError on failure."""
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def make_side(name: str, root: Path, rev: str, tmp: Path) -> Side:
    """A side whose processes import from ``root`` and start their Ray under ``tmp``."""
    env = fresh_ray_env(tmp / "ray", PYTHONPATH=f"{root}{os.pathsep}{tmp / 'site'}")
    return Side(name, rev, root, env)


def check_imports(side: Side, timeout_s: float) -> dict[str, Any]:
    """Asserts that the driver and a Ray worker import tdscheme from the side's checkout.

    Raises:
        RuntimeError: either imports it from elsewhere, or an editable finder is left.
    """
    out = json.loads(side.run(["-c", PROBE], "import probe", timeout_s)[0].splitlines()[-1])
    files = [out[p][k] for p in ("driver", "worker") for k in ("tdscheme", "on_path")]
    files.append(out["cli"])
    finders = out["driver"]["editable_finders"] + out["worker"]["editable_finders"]
    if finders or not all(Path(f).is_relative_to(side.root / "tdscheme") for f in files):
        raise RuntimeError(f"{side.name} should import tdscheme from {side.root}: {out}")
    return out


Row = tuple[str, str, float, str]  # case, metric, value, unit


def run_collection(side: Side, args: argparse.Namespace, seed: int | None) -> list[Row]:
    """The side's own ``benchmarks/collection.py ARGS.collection_args``: one row per value."""
    command = ["benchmarks/collection.py", *args.collection_args]
    stdout = side.run(command, "collection.py", args.timeout_s)[0]
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [
        (f"{r['section']} {r['impl']} {r['env']} {r['order']}", r["metric"], r["value"], r["unit"])
        for r in rows
        if r["value"] is not None  # a failed measurement (its note says why)
    ]


def run_train(side: Side, args: argparse.Namespace, seed: int | None) -> list[Row]:
    """``tdscheme train ppo-cartpole --seed SEED ARGS.train_args`` in the side's checkout."""
    case = "ppo-cartpole " + ("+ --train-args" if args.train_args else "to 475")
    with tempfile.TemporaryDirectory(prefix="revbench-run-") as run_dir:
        command = ["-c", TRAIN_ENTRY, "train", "ppo-cartpole", "--seed", str(seed),
                   "--run-dir", run_dir, "--progress", "false", *args.train_args]  # fmt: skip
        stdout, _, exit_s = side.run(command, f"train seed {seed}", args.timeout_s)
    out = train_result(stdout, exit_s)
    units = {"wall_s": "s", "exit_s": "s", "frames": "frames", "reached": "bool"}
    return [(case, metric, float(out[metric]), unit) for metric, unit in units.items()]


def compare(rec: Recorder, sides: list[Side], args: argparse.Namespace) -> None:
    """Every section, ``args.repeats`` times per side (and seed), alternating who goes first.

    ``sides`` is (head, base): the very first run, which may pay for a cold machine, is
    the head's, so that such a cost can only hide a speed-up, never a slowdown.
    """
    runs = {"collection": run_collection, "train": run_train}
    pair = 0
    for section in args.sections:
        for repeat in range(args.repeats):
            for seed in args.seeds if section == "train" else [None]:
                for side in turn_order(sides, pair):
                    what = f"{section} repeat {repeat} {side.name}"
                    what += "" if seed is None else f" seed {seed}"
                    log(what)
                    for case, metric, value, unit in runs[section](side, args, seed):
                        rec.add(Measurement(section, side.name, side.rev, case, metric, value,
                                            unit, repeat, seed))  # fmt: skip
                pair += 1


def table(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """Per section: a row per (case, metric) with each side's median and range, and the ratio."""

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

    values: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for m in ms:
        values.setdefault((m.section, m.case, m.metric), {"base": [], "head": []})[m.side].append(
            m.value
        )
    out: dict[str, list[list[str]]] = {}
    for (section, case, metric), by_side in values.items():
        rows = out.setdefault(section, [["case", "metric", "n", "base median", "head median",
                                         "head/base", "base range", "head range"]])  # fmt: skip
        if not by_side["base"] or not by_side["head"]:
            continue
        base, head = statistics.median(by_side["base"]), statistics.median(by_side["head"])
        ratio = f"{head / base:.3f}" if base else "n/a"
        ranges = [f"{fmt(min(v))}-{fmt(max(v))}" for v in by_side.values()]
        rows.append([case, metric, str(len(by_side["head"])), fmt(base), fmt(head), ratio, *ranges])
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options; ``sections``, ``seeds`` and the ``*_args`` as lists."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", default=None, help="git revision (default origin/main, else HEAD)"
    )
    parser.add_argument("--sections", default=",".join(SECTIONS), help="collection,train")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side (and seed)")
    parser.add_argument("--seeds", default="0,1,2", help="train seeds, comma-separated")
    parser.add_argument("--quick", action="store_true", help="short runs: a smoke test")
    parser.add_argument("--collection-args", help=f"collection.py's, '{COLLECTION_ARGS[0]}'")
    parser.add_argument(
        "--train-args", help="more tdscheme train options: --train-args='--lr 1e-3'"
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per process")
    parser.add_argument("--out", default=None, help="also write a markdown section to this path")
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    if not args.sections or set(args.sections) - set(SECTIONS) or args.repeats < 1:
        parser.error(f"--sections: a subset of {','.join(SECTIONS)}; --repeats: at least 1")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: comma-separated ints, e.g. 0,1,2")
    for name, defaults in (("collection_args", COLLECTION_ARGS), ("train_args", TRAIN_ARGS)):
        value = getattr(args, name)
        setattr(args, name, shlex.split(defaults[args.quick] if value is None else value))
    return args


@contextlib.contextmanager
def checkouts(head_root: Path, base: str) -> Iterator[list[Side]]:
    """Checks ``base`` out into a temporary directory; yields the head and base sides.

    Each side's tree is compiled first (a fresh checkout would pay it in its first run)
    and its imports checked; on exit the base checkout, the Ray sessions and any process
    the runs left behind are removed.
    """
    base_rev = git(head_root, "rev-parse", "--short", f"{base}^{{commit}}")
    head_rev = git(head_root, "rev-parse", "--short", "HEAD")
    head_rev += "+dirty" if git(head_root, "status", "--short") else ""
    # Orphans of our runs (Ray workers whose raylet is gone) are re-parented to us: reap_children.
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed (Linux only)")
    tmp = Path(tempfile.mkdtemp(prefix="revbench-", dir="/tmp"))  # short: Ray's socket paths
    try:
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        git(head_root, "worktree", "add", "--detach", "-q", str(tmp / "base"), base_rev)
        sides = [make_side("head", head_root, head_rev, tmp),
                 make_side("base", tmp / "base", base_rev, tmp)]  # fmt: skip
        for side in sides:
            side.run(["-m", "compileall", "-q", "tdscheme", "benchmarks"], "compileall", 300)
            out = check_imports(side, timeout_s=300)
            log(
                f"{side.name} {side.rev}: the driver and a Ray worker import "
                f"{out['worker']['tdscheme']}"
            )
        yield sides
    finally:
        reap_children()
        with contextlib.suppress(subprocess.CalledProcessError):
            git(head_root, "worktree", "remove", "--force", str(tmp / "base"))
        shutil.rmtree(tmp, ignore_errors=True)
        git(head_root, "worktree", "prune")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    head_root = Path(git(Path(__file__).parent, "rev-parse", "--show-toplevel"))
    if args.base is None:
        origin = subprocess.run(["git", "rev-parse", "-q", "--verify", "origin/main"],
                                cwd=head_root, capture_output=True, check=False)  # fmt: skip
        args.base = "origin/main" if origin.returncode == 0 else "HEAD"
    started = time.perf_counter()
    with checkouts(head_root, args.base) as sides:
        rec = Recorder()
        compare(rec, sides, args)
    seconds = time.perf_counter() - started
    tables = table(rec.measurements)
    print_tables(tables)
    revs = f"base {args.base} ({sides[1].rev}), head the working tree ({sides[0].rev})"
    print(f"\n{revs}: {len(rec.measurements)} measurements in {seconds:.0f} s", flush=True)
    if args.out:
        intro = (f"{revs}, alternating head/base and base/head; head/base: frames/s >1 and "
                 "seconds <1 mean the head is faster.")  # fmt: skip
        write_markdown(args.out, title="Revisions: the working tree against a base revision",
                       script="tools/revisions.py", argv=argv, seconds=seconds, machine=rec.machine,
                       intro=intro, tables=tables)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
