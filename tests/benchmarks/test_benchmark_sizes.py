"""No benchmark module past 600 lines: a script that grows past it holds a second responsibility.

The shared harness is ``benchmarks/report.py`` (what a script says) and
``benchmarks/harness.py`` (how it measures); a script's sections split by family (as
``collection.py``'s ``collection_*.py``), fault rows by kind of fault.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MAX_LINES = 600
#: Being changed by their owners now; drop each once it is under the limit again.
EXCLUDED = ("torchrl_clients/*", "learning.py", "learning_peers.py")


def oversized(
    root: Path, *, max_lines: int = MAX_LINES, excluded: tuple[str, ...] = ()
) -> list[str]:
    """The ``.py`` files under ``root`` with more than ``max_lines`` lines, as ``"path: N lines"``.

    ``excluded`` holds ``fnmatch`` patterns of paths relative to ``root`` (``*`` spans folders).
    """
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if any(fnmatch(relative.as_posix(), pattern) for pattern in excluded):
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > max_lines:
            found.append(f"{relative.as_posix()}: {lines} lines")
    return found


def test_no_benchmark_module_over_600_lines() -> None:
    assert oversized(BENCHMARKS, excluded=EXCLUDED) == []


def test_the_check_flags_a_601_line_module(tmp_path: Path) -> None:
    (tmp_path / "rows" / "deep").mkdir(parents=True)
    (tmp_path / "rows" / "deep" / "big.py").write_text("x = 1\n" * 601, encoding="utf-8")
    (tmp_path / "small.py").write_text("x = 1\n" * 600, encoding="utf-8")
    assert oversized(tmp_path) == ["rows/deep/big.py: 601 lines"]
    assert oversized(tmp_path, excluded=("rows/*",)) == []
