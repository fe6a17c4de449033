"""benchmarks/: its README names every script; the tools run from tools/; imports point one way.

The user's scripts sit at the top of ``benchmarks/``, the measuring tools of closed
investigations in ``benchmarks/tools/``. A tool imports the top's modules (``harness``,
``peers``, ...) by name once its ``sys.path`` line has put ``benchmarks/`` first; nothing at the
top imports a tool, so that a user's script never depends on one.
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PATH_LINE = "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))"


def imported_names(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level module)`` of every absolute import in ``path``, functions' included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return sorted(found)


def tools_imported_from_the_top(root: Path) -> list[str]:
    """``"path: name"`` for each module outside ``root/tools/`` that imports a tool."""
    tools = {p.stem for p in (root / "tools").glob("*.py")}
    return [
        f"{path.relative_to(root).as_posix()}: {name}"
        for path in sorted(root.rglob("*.py"))
        if "tools" not in path.relative_to(root).parts
        for _, name in imported_names(path)
        if name in tools
    ]


def tools_without_the_path_line(root: Path) -> list[str]:
    """The tools lacking the ``sys.path`` line at module level before their first import of a
    module from ``root`` (``harness``, ``peers``, ...)."""
    top = {p.stem for p in root.glob("*.py")}
    missing = []
    for path in sorted((root / "tools").glob("*.py")):
        module = ast.parse(path.read_text(encoding="utf-8"))
        lines = [n.lineno for n in module.body if ast.unparse(n) == PATH_LINE]
        first = next((line for line, name in imported_names(path) if name in top), None)
        if not lines or (first is not None and first < lines[0]):
            missing.append(path.name)
    return missing


def unlisted(root: Path) -> list[str]:
    """The scripts of ``root`` and ``root/tools/`` that ``root/README.md`` does not name."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    scripts = [*root.glob("*.py"), *(root / "tools").glob("*.py")]
    return sorted(p.name for p in scripts if f"`{p.name}`" not in readme)


def test_no_script_at_the_top_imports_a_tool() -> None:
    assert tools_imported_from_the_top(BENCHMARKS) == []


def test_every_tool_puts_benchmarks_on_its_path_first() -> None:
    assert any((BENCHMARKS / "tools").glob("*.py"))
    assert tools_without_the_path_line(BENCHMARKS) == []


def test_the_readme_names_every_script_and_tool() -> None:
    assert unlisted(BENCHMARKS) == []


def test_the_checks_flag_a_wrong_folder(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "harness.py").write_text("x = 1\n")
    (tmp_path / "user.py").write_text("def main():\n    import probe\n")
    (tmp_path / "tools" / "probe.py").write_text(
        f"import sys\nfrom pathlib import Path\n\n{PATH_LINE}\n\nimport harness\n"
    )
    (tmp_path / "tools" / "late.py").write_text(
        f"import sys\nfrom pathlib import Path\n\nimport harness\n\n{PATH_LINE}\n"
    )
    (tmp_path / "tools" / "none.py").write_text("import harness\n")
    (tmp_path / "README.md").write_text("`harness.py`, `user.py`, `probe.py`, `late.py`\n")
    assert tools_imported_from_the_top(tmp_path) == ["user.py: probe"]
    assert tools_without_the_path_line(tmp_path) == ["late.py", "none.py"]
    assert unlisted(tmp_path) == ["none.py"]


def table_cells(text: str) -> list[list[str]]:
    """The cells of each Markdown table row of ``text`` (a ``|`` inside backticks stays in its cell)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells, cell, in_code = [], "", False
        for char in line.strip()[1:-1]:
            if char == "`":
                in_code = not in_code
            if char == "|" and not in_code:
                cells.append(cell.strip())
                cell = ""
            else:
                cell += char
        rows.append([*cells, cell.strip()])
    return rows


def results_page_problems(text: str, max_cell: int = 400) -> list[str]:
    """Why a RESULTS page does not read at a glance: long cells, a free-text ``met?`` column."""
    header, *rows = table_cells(text)
    met = header.index("met?")
    problems = []
    for number, row in enumerate(rows, 1):
        long = [i for i, cell in enumerate(row) if len(cell) > max_cell]
        if long:
            problems.append(f"row {number}: cell(s) {long} over {max_cell} characters")
        if not row[met].startswith(("met", "not met", "measured")):
            problems.append(f"row {number}: met? is {row[met][:40]!r}; accepted: met, not met, measured")
    return problems


def test_results_read_at_a_glance():
    """Issue 65: RESULTS.md holds the current figure of each target; the history is on its page."""
    text = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    assert len(table_cells(text)) > 50
    assert results_page_problems(text) == []


def test_a_long_or_free_text_row_is_named():
    bad = "| target | latest figure | met? |\n|---|---|---|\n| a | " + "x" * 401 + " | yes, mostly |\n"
    assert results_page_problems(bad) == [
        "row 1: cell(s) [1] over 400 characters",
        "row 1: met? is 'yes, mostly'; accepted: met, not met, measured",
    ]
