"""benchmarks/torchrl_suite.py: it skips without torchrl's test file, and it swaps the class.

torchrl's own test file is not in this repository (CI has no copy), so the swap is checked on
a small test file written here, in the shape of torchrl's: a test class naming RayCollector,
tests building it in the pytest process and in a spawned child process, and one that hangs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

# slow: runs torchrl's test file in a pytest subprocess with its own Ray
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

SUITE = """
import multiprocessing
import time

import pytest
from torchrl.collectors.distributed import RayCollector


class TestRayCollector:
    @classmethod
    def _build(cls):
        # tdscheme's class rejects frames_per_batch=0 before it starts Ray; torchrl's would start one
        assert RayCollector.__module__.startswith("tdscheme."), RayCollector
        with pytest.raises(ValueError, match="frames_per_batch"):
            RayCollector(lambda: None, frames_per_batch=0)

    @classmethod
    def _build_in_child(cls, queue):
        try:
            cls._build()
            queue.put("built")
        except BaseException as err:
            queue.put(repr(err))

    def test_builds_here(self):
        self._build()

    def test_builds_in_spawned_child(self):
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=self._build_in_child, args=(queue,))
        child.start()
        try:
            assert queue.get(timeout=120) == "built"
        finally:
            child.join(30)

    def test_builds_nothing(self):
        pass

    @pytest.mark.timeout(3)
    def test_hangs_with_tdscheme(self):
        self._build()
        time.sleep(600)  # as a test blocked in ray.get: its pytest process is stopped

    def test_builds_after_the_hang(self):
        self._build()


class TestUnrelated:
    def test_other(self):
        pass
"""


def _load_script():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(
            "torchrl_suite", BENCHMARKS / "torchrl_suite.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclass looks its module up while it is built
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.fixture(scope="module")
def suite():
    return _load_script()


def test_skips_without_a_copy(suite, capsys, monkeypatch):
    monkeypatch.delenv(suite.TESTS_ENV, raising=False)
    assert suite.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SKIPPED: no copy of pytorch/rl test/test_distributed.py")
    assert "never downloads" in out


def test_skips_when_the_copy_is_missing(suite, capsys, tmp_path):
    assert suite.main(["--tests", str(tmp_path / "absent.py")]) == 0
    assert "which is not a file" in capsys.readouterr().out


def test_swaps_the_class_and_goes_on_after_a_hung_test(suite, capsys, tmp_path):
    tests = tmp_path / "suite" / "test_suite_shape.py"
    tests.parent.mkdir()
    tests.write_text(textwrap.dedent(SUITE))
    status = suite.main(
        ["--tests", str(tests), "--peer", "torchrl", "--log-dir", str(tmp_path / "logs")]
    )
    assert status == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    got = {(r["collector"], r["test"].rsplit("::", 1)[-1]): r for r in rows}
    # only the tests that build a RayCollector run; the others are deselected
    selected = ["test_builds_here", "test_builds_in_spawned_child", "test_hangs_with_tdscheme"]
    selected.append("test_builds_after_the_hang")
    assert sorted(got) == sorted((c, t) for c in ("tdscheme", "torchrl") for t in selected)
    assert got["tdscheme", "test_hangs_with_tdscheme"]["outcome"] == "timeout"
    assert got["tdscheme", "test_hangs_with_tdscheme"]["built"] == 1
    # a new pytest process ran the test after the one that hung
    for test in ("test_builds_here", "test_builds_in_spawned_child", "test_builds_after_the_hang"):
        assert got["tdscheme", test]["outcome"] == "passed", got["tdscheme", test]
        assert got["tdscheme", test]["built"] == 1
        assert got["torchrl", test]["outcome"] == "failed"  # the baseline keeps torchrl's class
        assert got["torchrl", test]["built"] == 0
