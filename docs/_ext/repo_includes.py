"""Markdown files of the repository outside ``docs/``, included into pages of this site.

``benchmarks/README.md`` links to the repository's other files (``results/<topic>.md``,
``../docs/ARCHITECTURE.md``) by relative path, which is right on GitHub and unresolvable here
(they are not pages of the site). When such a file is included, each of its links to a
Markdown file is rewritten: to this site's page where one holds that file
(:data:`PAGES`), else to the file's path in the repository, shown as code. Links to pages of
the site itself are never touched, so ``-W`` still checks them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: Repository files that are included in a page of this site, and that page.
PAGES = {"docs/ARCHITECTURE.md": "architecture.md", "benchmarks/README.md": "performance.md"}
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s:#]+\.md)(#[^)\s]*)?\)")


def rewrite_links(text: str, included: Path, repo: Path, docs: Path) -> str:
    """``text`` of ``included`` with its links to Markdown files pointed at this site or named."""

    def replace(match: re.Match[str]) -> str:
        label, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        path = (included.parent / target).resolve()
        try:
            repo_path = path.relative_to(repo).as_posix()
        except ValueError:
            return match.group(0)
        if repo_path in PAGES:  # relative to docs/, where the including page is
            return f"[{label}]({PAGES[repo_path]}{anchor})"
        return f"{label} (`{repo_path}`)"

    return _LINK.sub(replace, text)


def setup(app: Any) -> dict[str, Any]:
    docs = Path(app.srcdir).resolve()
    repo = docs.parent

    def on_include(app: Any, relative_path: Path, parent_docname: str, content: list[str]) -> None:
        included = (docs / relative_path).resolve()
        if docs in included.parents:  # a file of docs/ is written for the site already
            return
        content[0] = rewrite_links(content[0], included, repo, docs)

    app.connect("include-read", on_include)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
