"""pytest plugin of ``benchmarks/torchrl_suite.py``: torchrl's RayCollector tests, either class.

``benchmarks/torchrl_suite.py`` runs pytest on a copy of torchrl's
``test/test_distributed.py`` with ``-p torchrl_suite_plugin`` (``benchmarks/`` on
``PYTHONPATH``). The plugin's options:

* ``--suite-collector tdscheme|torchrl``: with ``tdscheme``, once torchrl is imported,
  ``tdscheme.RayCollector`` takes the place of torchrl's class in
  ``torchrl.collectors.distributed``, in ``torchrl.collectors.distributed.ray`` (where
  torchrl's own ``Collector(..., num_collectors=n)`` factory looks it up) and in every
  name of a collected test module bound to torchrl's class. ``torchrl`` changes nothing:
  the baseline.
* ``--suite-select collector|all``: the scope is every test class (and module-level test)
  whose code names ``RayCollector``. ``collector`` (default) keeps the tests in it that
  build a RayCollector: their code, or the ``self._x`` / ``cls._x`` helpers they use, names
  ``RayCollector`` or calls ``distributed_class()`` or a ``Collector(..., num_collectors=)``;
  ``all`` keeps the whole scope (the trainer and replay-buffer tests too).
* ``--suite-results PATH``: one JSON line per test: ``test``, ``outcome`` (passed, failed,
  error, skipped), ``seconds``, ``message`` (the failure's first line, or the skip reason),
  ``cause`` (the innermost exception line, for a test that re-raises a child process's
  error) and ``built`` (how many RayCollectors of the class under test the test built,
  child processes included). ``PATH.current`` names the running test, so that a test that
  never finishes (its pytest process killed) is known.
* ``--suite-ray-num-cpus N``: the CPUs the Ray started by the test file's fixtures declares
  (they start it with torchrl's ``DEFAULT_RAY_INIT_CONFIG``, which leaves it to the machine).

Nothing of torchrl's test code is copied here: the plugin only selects, substitutes and
records.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

#: Environment variable naming the file each RayCollector construction appends its test id to.
BUILT_LOG_ENV = "TORCHRL_SUITE_BUILT_LOG"
#: The class under test (``--suite-collector``), for processes spawned from the tests.
COLLECTOR_ENV = "TORCHRL_SUITE_COLLECTOR"
#: The pytest process's id: only its direct children install the class (not Ray's processes).
PYTEST_PID_ENV = "TORCHRL_SUITE_PYTEST_PID"
#: The directory holding the sitecustomize that spawned children run.
SITE_DIR = Path(__file__).resolve().parent / "torchrl_suite_site"

_BUILDS_COLLECTOR = re.compile(r"RayCollector\b|distributed_class\(\)|num_collectors=")
_HELPER_CALL = re.compile(r"\b(?:self|cls)\.(_\w+)\b")
_EXCEPTION_LINE = re.compile(
    r"^E\s+((?:[A-Za-z_][\w.]*\.)?\w*(?:Error|Exception|Failed|Timeout)\b.*)$"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchrl-suite", "torchrl's RayCollector tests with tdscheme's class")
    group.addoption(
        "--suite-collector",
        choices=("tdscheme", "torchrl"),
        default="tdscheme",
        help="the RayCollector class the tests run against (default: tdscheme)",
    )
    group.addoption(
        "--suite-select",
        choices=("collector", "all"),
        default="collector",
        help="collector: the tests that build a RayCollector; all: every test of their classes",
    )
    group.addoption("--suite-results", default=None, help="write one JSON line per test here")
    group.addoption(
        "--suite-ray-num-cpus",
        type=int,
        default=None,
        help="num_cpus of the Ray the test file starts (its DEFAULT_RAY_INIT_CONFIG)",
    )


def pytest_configure(config: pytest.Config) -> None:
    collector = config.getoption("--suite-collector")
    original, replacement = install(collector)
    num_cpus = config.getoption("--suite-ray-num-cpus")
    if num_cpus is not None:
        import torchrl.collectors.distributed.ray as torchrl_ray

        # the test classes' fixtures start Ray with dict(DEFAULT_RAY_INIT_CONFIG)
        torchrl_ray.DEFAULT_RAY_INIT_CONFIG["num_cpus"] = num_cpus
    # Processes that multiprocessing spawns from the tests run ``torchrl_suite_site``'s
    # sitecustomize, which calls install() too (see there).
    os.environ.update(
        {
            COLLECTOR_ENV: collector,
            PYTEST_PID_ENV: str(os.getpid()),
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(SITE_DIR), str(SITE_DIR.parent), os.environ.get("PYTHONPATH")])
            ),
        }
    )
    run = SuiteRun(
        original,
        replacement,
        select=config.getoption("--suite-select"),
        results_path=config.getoption("--suite-results"),
    )
    config.pluginmanager.register(run, "torchrl-suite-run")


def install(collector: str) -> tuple[type, type]:
    """Imports torchrl, then puts ``collector``'s RayCollector class in torchrl's place.

    Also records every construction of that class (see :func:`_record_constructions`).

    Args:
        collector: ``"tdscheme"`` (substitute ``tdscheme.RayCollector``) or ``"torchrl"``
            (keep torchrl's class).

    Returns:
        torchrl's class and the class the tests now get.
    """
    import torchrl.collectors.distributed as distributed
    import torchrl.collectors.distributed.ray as torchrl_ray

    original = getattr(torchrl_ray, "_torchrl_suite_original", torchrl_ray.RayCollector)
    torchrl_ray._torchrl_suite_original = original
    replacement = original
    if collector == "tdscheme":
        from tdscheme import RayCollector as replacement

        distributed.RayCollector = replacement
        torchrl_ray.RayCollector = replacement
    _record_constructions(replacement)
    return original, replacement


class SuiteRun:
    """The hooks of one run: selection, the swap in the test modules, one JSON line per test.

    Args:
        original: torchrl's RayCollector class.
        replacement: the class the tests get instead (``original`` for the baseline).
        select: ``"collector"`` or ``"all"`` (``--suite-select``).
        results_path: where the JSON lines go (``None``: nowhere).
    """

    def __init__(
        self, original: type, replacement: type, *, select: str, results_path: str | None
    ) -> None:
        self.original = original
        self.replacement = replacement
        self.select = select
        self.results_path = results_path
        self._rows: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        for module in {item.module for item in items if getattr(item, "module", None)}:
            for name, value in list(vars(module).items()):
                if value is self.original:
                    setattr(module, name, self.replacement)
        everything = self.select == "all"
        keep = [item for item in items if _in_scope(item) and (everything or _builds(item))]
        dropped = [item for item in items if item not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.results_path:  # a test that never finishes is named in this file
            Path(self.results_path + ".current").write_text(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self._rows.setdefault(report.nodeid, {"test": report.nodeid, "outcome": "passed"})
        row["seconds"] = round(row.get("seconds", 0.0) + report.duration, 2)
        if report.skipped and row["outcome"] == "passed":
            reason = (
                report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            )
            row.update(outcome="skipped", message=reason.removeprefix("Skipped: "))
        elif report.failed and row["outcome"] in ("passed", "skipped"):
            row["outcome"] = "failed" if report.when == "call" else "error"
            row.update(_describe(report))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        row = self._rows.pop(nodeid, None)
        if row is None or not self.results_path:
            return
        row["built"] = _constructions(nodeid)
        # one write(2) of the whole line: a process killed meanwhile leaves no torn line
        fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode())
        finally:
            os.close(fd)
        Path(self.results_path + ".current").unlink(missing_ok=True)


# -- helpers -------------------------------------------------------------------------------


def _constructions(nodeid: str) -> int:
    path = os.environ.get(BUILT_LOG_ENV)
    if not path or not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.rstrip("\n") == nodeid)


def _record_constructions(cls: type) -> None:
    """Wraps ``cls.__init__`` so that each construction appends the running test's id to a file.

    A file, not memory: tests that build the collector in a spawned child process count too
    (the child runs :func:`install` and inherits ``PYTEST_CURRENT_TEST`` and the environment).
    ``functools.wraps`` keeps the signature that torchrl's ``Collector`` factory inspects.
    """
    init = cls.__init__
    if getattr(init, "_torchrl_suite_recorded", False):
        return

    @functools.wraps(init)
    def recorded_init(self: Any, *args: Any, **kwargs: Any) -> None:
        path = os.environ.get(BUILT_LOG_ENV)
        current = os.environ.get("PYTEST_CURRENT_TEST", "")
        if path and current:
            with open(path, "a") as f:
                f.write(current.rsplit(" (", 1)[0] + "\n")
        init(self, *args, **kwargs)

    recorded_init._torchrl_suite_recorded = True  # type: ignore[attr-defined]
    cls.__init__ = recorded_init  # type: ignore[misc]


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _in_scope(item: pytest.Item) -> bool:
    owner = getattr(item, "cls", None) or getattr(item, "function", None)
    return "RayCollector" in _source(owner)


def _builds(item: pytest.Item) -> bool:
    cls = getattr(item, "cls", None)
    pending, seen = [getattr(item, "function", None)], set()
    while pending:
        text = _source(pending.pop())
        if _BUILDS_COLLECTOR.search(text):
            return True
        for name in _HELPER_CALL.findall(text):
            if cls is not None and name not in seen and hasattr(cls, name):
                seen.add(name)
                pending.append(getattr(cls, name))
    return False


def _describe(report: pytest.TestReport) -> dict[str, str]:
    """The failure's first line, and its innermost exception line when that differs.

    The innermost is the last exception line pytest marks with ``E``: the end of a remote
    traceback that a ``WorkerError`` carries, or of a child process's traceback that a test
    re-raises (``RuntimeError: Error with stack ...``).
    """
    text = report.longreprtext or ""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else (text.strip().splitlines() or [""])[-1]
    message = message.splitlines()[0] if message else ""
    causes = [m.group(1) for line in text.splitlines() if (m := _EXCEPTION_LINE.match(line))]
    cause = causes[-1] if causes else ""
    return {"message": message[:500], "cause": "" if cause in message else cause[:500]}
