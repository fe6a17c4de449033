"""Every ```python block of the documentation site runs, as a reader would paste it.

Each page of docs/ with such blocks is one test: its blocks run in order in one namespace
(a later block uses the names an earlier one defined, as the page reads), in a temporary
directory, on the session's Ray (tdscheme joins a running Ray; ``ray_clean`` fails a page
that leaves an actor alive). A failure names the page and the line of the block's first
line of code, and the traceback points into the .md file.

A block that cannot run here is marked on the line directly above its fence, with why:

    <!-- not run: needs a multi-node Ray cluster -->

(MyST passes an HTML comment into the page's HTML, where it does not show; the site builds
with warnings as errors.) Only a multi-node cluster, a GPU or an extra that CI does not
install is a reason; a marker without one fails, and so does one that is not directly above
a ```python fence. Frame budgets are the pages' own: a block that trains stops after a few
thousand frames, as a first run on a 2-core laptop should. Each block's seconds are printed
(``-rA`` shows them).
"""

from __future__ import annotations

import re
import textwrap
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

DOCS = Path(__file__).resolve().parents[1] / "docs"

_FENCE = re.compile(r"^(?P<indent> *)```python\s*$")
_MARKER = re.compile(r"^\s*<!-- not run:(?P<reason>.*?)-->\s*$")


def _is_marker(line: str) -> bool:
    """Whether a line is meant as a ``not run`` marker (well formed or not)."""
    return "<!--" in line and "not run" in line.lower()


@dataclass(frozen=True)
class Block:
    """One ```python block of a page: its code (dedented) and where it starts."""

    page: str
    line: int  # 1-based line, in the .md file, of the block's first line of code
    code: str
    not_run: str | None  # the marker's reason, or None: the block runs


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown page, in order.

    Raises:
        ValueError: a ``not run`` marker without a reason or not of the form
            ``<!-- not run: REASON -->``, or one that is not directly above a ```python
            fence; a fence that is never closed.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, markers_used = [], set()
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        indent, start = fence["indent"], index + 1
        end = next((i for i in range(start, len(lines)) if lines[i] == f"{indent}```"), None)
        if end is None:
            raise ValueError(f"{path.name}:{index + 1}: a ```python fence never closed")
        reason = None
        if index and _is_marker(lines[index - 1]):
            marker = _MARKER.match(lines[index - 1])
            reason = marker["reason"].strip() if marker else ""
            if not reason:
                raise ValueError(
                    f"{path.name}:{index}: a 'not run' marker without a reason "
                    f"(the form: <!-- not run: REASON -->)"
                )
            markers_used.add(index - 1)
        code = textwrap.dedent("\n".join(line.removeprefix(indent) for line in lines[start:end]))
        blocks.append(Block(path.stem, start + 1, code, reason))
        index = end + 1
    stray = [i + 1 for i, line in enumerate(lines) if _is_marker(line) and i not in markers_used]
    if stray:
        raise ValueError(f"{path.name}:{stray[0]}: a 'not run' marker not directly above ```python")
    return blocks


class DocBlockError(AssertionError):
    """A block of a docs page raised: the page and line are in the message."""


def run_blocks(blocks: list[Block], source: Path) -> dict[str, object]:
    """Runs the blocks in order in one namespace and returns it; prints each block's seconds.

    Each block is compiled as ``source`` at its own line, so a traceback shows the .md
    file's lines. On a failure, whatever the namespace holds that can be shut down
    (collectors, schemes, buffers) is, so that one failing page leaves no actors for
    the next test; on success the page must have done it itself.

    Raises:
        DocBlockError: a block raised, naming the page and the block's first line.
    """
    namespace: dict[str, object] = {"__name__": "__main__"}  # as a user's script
    for block in blocks:
        if block.not_run:
            continue
        start = time.monotonic()
        try:
            code = compile("\n" * (block.line - 1) + block.code, str(source), "exec")
            exec(code, namespace)  # the documentation's own code
            print(f"docs/{source.name}:{block.line}: {time.monotonic() - start:.1f} s")
        except BaseException as err:
            _shut_down_all(namespace)
            if not isinstance(err, Exception):  # a timeout or Ctrl-C stays what it is
                raise
            raise DocBlockError(
                f"docs/{source.name}, the block at line {block.line} raised "
                f"{type(err).__name__}: {err}"
            ) from err
    return namespace


def _shut_down_all(namespace: dict[str, object]) -> None:
    for value in namespace.values():
        if isinstance(value, type | types.ModuleType | types.FunctionType):
            continue  # a module's shutdown (ray.shutdown) is no object's
        shutdown = getattr(value, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception:  # best effort, after the failure that is reported
                pass


PAGES = sorted(p.stem for p in DOCS.glob("*.md") if "```python" in p.read_text(encoding="utf-8"))


@pytest.mark.slow  # 10-60 s a page on 2 cores: each collector, scheme or buffer starts actors
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, ray_clean, tmp_path, monkeypatch):
    """Runs the page's blocks in order, in a temporary directory, leaving no actor alive."""
    monkeypatch.chdir(tmp_path)  # run directories and checkpoints the blocks write
    path = DOCS / f"{page}.md"
    blocks = python_blocks(path)
    assert any(not block.not_run for block in blocks), f"every block of {page}.md is marked"
    threads = torch.get_num_threads()  # a page may set torch's threads, as a user's script does
    try:
        run_blocks(blocks, path)
    finally:
        torch.set_num_threads(threads)


def test_every_marker_gives_a_reason_and_sits_above_a_block():
    for path in sorted(DOCS.glob("*.md")):
        python_blocks(path)  # raises for a marker without a reason or astray


def test_a_marker_without_a_reason_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n<!-- not run: -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match=r"page.md:3: a 'not run' marker without a reason"):
        python_blocks(page)
    page.write_text("<!-- not run -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match=r"page.md:1: a 'not run' marker without a reason"):
        python_blocks(page)
    page.write_text("<!-- not run: needs a GPU -->\n\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match=r"page.md:1: a 'not run' marker not directly above"):
        python_blocks(page)


def test_a_failing_block_names_its_page_and_line(tmp_path):
    """Negative control: the last block fails; the two before the marked one ran, it did not."""
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nx = 1\n```\n\n"
        "- In a list:\n\n  ```python\n  y = x + 1\n  ```\n\n"
        "<!-- not run: needs a GPU -->\n```python\nraise SystemExit('never run')\n```\n\n"
        "```python\nz = y\nundefined_name\n```\n"
    )  # fmt: skip
    blocks = python_blocks(page)
    lines = [(b.line, b.not_run) for b in blocks]
    assert lines == [(4, None), (10, None), (15, "needs a GPU"), (19, None)]
    with pytest.raises(
        DocBlockError, match=r"docs/page.md, the block at line 19 raised NameError"
    ) as info:
        run_blocks(blocks, page)
    frames = traceback.walk_tb(info.value.__cause__.__traceback__)
    assert (str(page), 20) in [(f.f_code.co_filename, line) for f, line in frames]  # the .md line
    assert run_blocks(blocks[:2], page)["y"] == 2
