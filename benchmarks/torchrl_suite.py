"""torchrl's own RayCollector tests, run with tdscheme's class in place of torchrl's.

A user judges a drop-in by running the original's tests against it. This script runs
pytest on a copy of torchrl's ``test/test_distributed.py`` (pytorch/rl, at the tag of the
installed torchrl) with :mod:`torchrl_suite_plugin`, which puts ``tdscheme.RayCollector``
where torchrl's class was, once torchrl is imported, and keeps the tests that build a
RayCollector (``--select all``: every test of the classes that name it). With
``--peer torchrl`` it runs the same tests against torchrl's own class too, in a
second pytest process, as the baseline. Run from the repository root::

    .venv/bin/python benchmarks/torchrl_suite.py --tests /path/to/test_distributed.py
    .venv/bin/python benchmarks/torchrl_suite.py --tests ... --peer torchrl --ray-num-cpus 10 --out r.md
    TORCHRL_TEST_DISTRIBUTED=/path/to/test_distributed.py .venv/bin/python benchmarks/torchrl_suite.py -k updatepolicy

On a small machine pass ``--ray-num-cpus 10``: the test file starts Ray with the
machine's CPU count, and its trainer tests ask for up to about 10 one-CPU actors at once, so
on 2 cores they wait for resources forever (each is then stopped at ``--timeout-s`` and
recorded as ``timeout``; the run goes on with the next test).

The copy stays outside this repository and this script never downloads it: without
one (no ``--tests``, no ``TORCHRL_TEST_DISTRIBUTED``, or no file there) it prints why
it skips and exits 0. Each pytest run starts its own local Ray through the test
file's fixtures (``runtime_env`` with the test file's directory, so that Ray workers
import its policies) and shuts it down.

Output: one JSON line per test and class (outcome, seconds, how many RayCollectors the
test built, the failure's first line and innermost exception), then a table with one
row per test and one column per class, then each failure with tdscheme's class in full.
Exit status 0 whatever the outcomes (1 only when a pytest run produced no results).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from report import Recorder, print_tables, write_markdown

#: Environment variable that may name the copy of torchrl's test file.
TESTS_ENV = "TORCHRL_TEST_DISTRIBUTED"
#: Where torchrl's test file lives in pytorch/rl.
UPSTREAM = "pytorch/rl test/test_distributed.py"
BENCHMARKS = Path(__file__).resolve().parent
COLLECTORS = ("tdscheme", "torchrl")


@dataclass
class TestOutcome:
    """One test's outcome with one RayCollector class."""

    collector: str
    test: str
    outcome: str
    seconds: float
    built: int
    message: str = ""
    cause: str = ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tests",
        default=os.environ.get(TESTS_ENV),
        help=f"a copy of {UPSTREAM} (default: ${TESTS_ENV})",
    )
    parser.add_argument(
        "--peer",
        choices=("torchrl",),
        default=None,
        help="also run the tests against torchrl's own RayCollector (the baseline)",
    )
    parser.add_argument("--select", choices=("collector", "all"), default="collector")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument(
        "--timeout-s", type=float, default=240.0, help="per-test limit (pytest-timeout)"
    )
    parser.add_argument(
        "--run-timeout-s", type=float, default=5400.0, help="limit for all the tests of a class"
    )
    parser.add_argument(
        "--ray-num-cpus",
        type=int,
        default=None,
        help="CPUs the test file's Ray declares (default: the machine's); its trainer tests "
        "ask for up to about 10 one-CPU actors at once",
    )
    parser.add_argument("--log-dir", default=None, help="keep each pytest run's output here")
    parser.add_argument("--out", default=None, help="also write a markdown section here")
    return parser.parse_args(argv)


def missing_reason(path: str | None) -> str | None:
    """Why the suite cannot run (``None`` when ``path`` is a file)."""
    if not path:
        return (
            f"no copy of {UPSTREAM}: pass --tests PATH or set {TESTS_ENV} "
            f"(this script never downloads it)"
        )
    if not Path(path).is_file():
        return f"{TESTS_ENV}/--tests names {path}, which is not a file"
    return None


def run_suite(
    collector: str, tests: Path, args: argparse.Namespace, log_dir: Path
) -> list[TestOutcome]:
    """The tests with ``collector``'s class; their outcomes.

    A test that passes ``--timeout-s`` (often one blocked in a ``ray.get`` with no
    timeout, which no signal interrupts) stops its pytest process (pytest-timeout's
    ``thread`` method); it is recorded as ``timeout`` and a new pytest process runs the
    tests left. Each pytest process runs in its own process group, killed when it ends,
    so nothing it started (Ray's processes among them) outlives it.
    """
    results = log_dir / f"{collector}.jsonl"
    built = log_dir / f"{collector}.built"
    current = Path(f"{results}.current")  # the running test (the plugin writes it)
    for path in (results, built, current):
        path.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", str(tests), "-p", "torchrl_suite_plugin",
        f"--suite-collector={collector}", f"--suite-select={args.select}",
        f"--suite-results={results}", f"--timeout={args.timeout_s}", "--timeout-method=thread",
        f"--rootdir={tests.parent}", "-p", "no:cacheprovider", "-q", "-rfE",
    ]  # fmt: skip
    if args.ray_num_cpus is not None:
        command.append(f"--suite-ray-num-cpus={args.ray_num_cpus}")
    if args.keyword:
        command += ["-k", args.keyword]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCHMARKS), env.get("PYTHONPATH")]))
    env["TORCHRL_SUITE_BUILT_LOG"] = str(built)
    timeouts: list[TestOutcome] = []
    deadline = time.monotonic() + args.run_timeout_s
    for attempt in itertools.count():
        finished = [o.test for o in read_outcomes(collector, results)] + [o.test for o in timeouts]
        log = log_dir / f"{collector}.{attempt}.log"
        print(f"# {collector}: pytest running, output in {log}", file=sys.stderr, flush=True)
        deselect = [f"--deselect={test}" for test in finished]
        run_pytest(command + deselect, log, cwd=tests.parent, env=env, deadline=deadline)
        hung = current.read_text().strip() if current.exists() else ""
        current.unlink(missing_ok=True)
        if not hung or hung in finished or time.monotonic() >= deadline:
            break
        built_count = built.read_text().splitlines().count(hung) if built.exists() else 0
        timeouts.append(
            TestOutcome(
                collector=collector, test=hung, outcome="timeout", seconds=args.timeout_s,
                built=built_count, message=f"no result in --timeout-s={args.timeout_s}; see {log}",
            )
        )  # fmt: skip
    return read_outcomes(collector, results) + timeouts


def run_pytest(
    command: list[str], log: Path, *, cwd: Path, env: dict[str, str], deadline: float
) -> None:
    """Runs ``command`` in a new process group until it exits or ``deadline``; kills the group."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"# pytest ran past --run-timeout-s; stopped ({log})", file=sys.stderr)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def read_outcomes(collector: str, results: Path) -> list[TestOutcome]:
    """The outcomes the plugin wrote to ``results`` so far."""
    if not results.exists():
        return []
    outcomes = []
    with open(results) as f:
        for line in filter(str.strip, f):
            try:
                outcomes.append(TestOutcome(collector=collector, **json.loads(line)))
            except json.JSONDecodeError:  # torn by a kill (older plugin): that test runs again
                print(f"# skipped a torn result line: {line[:120]!r}", file=sys.stderr)
    return outcomes


def short_name(test: str) -> str:
    """``file::TestRayCollector::test_x[p]`` -> ``x[p]``; other classes keep their name."""
    name = test.split("::", 1)[-1].removeprefix("TestRayCollector::")
    return name.replace("test_", "", 1) if "::" not in name else name


def tables(outcomes: list[TestOutcome], collectors: list[str]) -> dict[str, list[list[str]]]:
    """The per-test table (one column per class) and the totals."""
    by_test: dict[str, dict[str, TestOutcome]] = {}
    for o in outcomes:
        by_test.setdefault(short_name(o.test), {})[o.collector] = o
    rows = [["test", *collectors, "built", "tdscheme failure"]]
    for test, per in by_test.items():
        ours = per.get("tdscheme")
        failure = (ours.cause or ours.message)[:90] if ours and ours.outcome != "passed" else ""
        cells = [per[c].outcome if c in per else "-" for c in collectors]
        built = "/".join(str(per[c].built) if c in per else "-" for c in collectors)
        rows.append([test, *cells, built, failure])
    kinds = ("passed", "failed", "error", "timeout", "skipped")
    totals = [["class", *kinds, "tests"]]
    for c in collectors:
        mine = [o for o in outcomes if o.collector == c]
        counts = [sum(o.outcome == k for o in mine) for k in kinds]
        totals.append([c, *map(str, counts), str(len(mine))])
    return {"torchrl's RayCollector tests": rows, "totals": totals}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    reason = missing_reason(args.tests)
    if reason:
        print(f"SKIPPED: {reason}", flush=True)
        return 0
    tests = Path(args.tests).resolve()
    collectors = ["tdscheme"] + ([args.peer] if args.peer else [])
    rec = Recorder()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchrl_suite_") as tmp:
        log_dir = Path(args.log_dir or tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        # the test file's Ray fixtures ship its directory to every worker (runtime_env
        # working_dir): run a copy alone in a directory of its own, whatever lies beside it
        # (a copy in /tmp once zipped /tmp, Ray's sessions included, until the disk was full)
        alone = Path(tmp) / "tests"
        alone.mkdir()
        tests = Path(shutil.copy(tests, alone / tests.name))
        status = 0
        for collector in collectors:
            outcomes = run_suite(collector, tests, args, log_dir)
            if not outcomes:
                log = log_dir / f"{collector}.0.log"
                print(f"# {collector}: no results; the end of {log}:", file=sys.stderr)
                print(log.read_text()[-3000:], file=sys.stderr)
                status = 1
            for outcome in outcomes:
                rec.add(outcome)
    seconds = time.perf_counter() - started
    made = tables(rec.measurements, collectors)
    print_tables(made, width=100)
    failures = [o for o in rec.measurements if o.collector == "tdscheme" and o.outcome != "passed"]
    if failures:
        print("\n== tdscheme failures")
        for o in failures:
            print(f"{o.test}: {o.outcome}\n    {o.message}\n    cause: {o.cause or '-'}")
    print(f"\n{len(rec.measurements)} outcomes in {seconds:.0f} s", flush=True)
    if args.out:
        write_markdown(
            args.out, title="torchrl's RayCollector tests with tdscheme's class",
            script="torchrl_suite.py", argv=argv, seconds=seconds, machine=rec.machine,
            intro=f"pytest on a copy of {UPSTREAM}; `built`: RayCollectors each test built "
            f"({'/'.join(collectors)}).",
            tables=made,
        )  # fmt: skip
        print(f"wrote {args.out}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
