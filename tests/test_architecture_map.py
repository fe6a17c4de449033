"""docs/ARCHITECTURE.md names every module of the package, in the folder it lives in.

The map's "Every module, by floor" block is read as a reader reads it: a folder
(``envs/``, or ``worker/`` indented under ``collectors/``) opens a room, and each
``name.py`` after it, up to the next folder, is a module of that room. A new module
the map does not name fails here, and so does a name the package no longer holds.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tdscheme"
MAP = ROOT / "docs" / "ARCHITECTURE.md"

#: Where a line's first word starts: a room (``envs/``, a loose module) or a folder in it.
ROOM_COLUMN, SUBFOLDER_COLUMN = 9, 11
#: ``name.py`` standing alone: ``runtime/allreduce.py`` is a cross-reference, not a listing.
MODULE_NAME = re.compile(r"(?<![/\w.])(\w+\.py)\b")


def modules_block(text: str) -> list[str]:
    """The lines of the fenced block under "## Every module, by floor"."""
    section = text.split("## Every module, by floor", 1)[1]
    return section.split("```", 2)[1].splitlines()


def named_modules(text: str) -> set[str]:
    """Every module the map names, as a path under ``tdscheme/`` (``collectors/worker/actor.py``)."""
    named: set[str] = set()
    room = folder = ""
    for line in modules_block(text):
        if line.startswith("floor"):
            line = " " * ROOM_COLUMN + line[ROOM_COLUMN:]
        stripped = line.lstrip()
        column, first = len(line) - len(stripped), stripped.split(" ", 1)[0]
        if column == ROOM_COLUMN and first:
            room, folder = (first, "") if first.endswith("/") else ("", "")
        elif column == SUBFOLDER_COLUMN and first:
            folder = first if first.endswith("/") else ""
        for name in MODULE_NAME.findall(line):
            named.add(f"{room}{folder}{name}")
    return named


def package_modules() -> set[str]:
    """Every module of the package but the ``__init__.py`` files (a folder is named by itself)."""
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent.name == "testing"
    }


def test_the_map_names_every_module_in_its_folder():
    named, modules = named_modules(MAP.read_text(encoding="utf-8")), package_modules()
    assert sorted(modules - named) == [], "modules docs/ARCHITECTURE.md does not name"
    assert sorted(named - modules - {"__init__.py"}) == [], "names the package does not hold"


def test_the_map_reader_places_each_name_in_its_folder():
    """The negative controls: a module named in the wrong room, or not at all, is not found."""
    text = (
        "## Every module, by floor\n\n```\n"
        "floor 0  (leaves)\n"
        "         keys.py         the frame keys (see runtime/ray_lease.py)\n"
        "floor 3  collectors/     one way:\n"
        "           worker/       actor.py (the actor),\n"
        "                         env_config.py\n"
        "           ray_collector.py  RayCollector\n"
        "         engine/         trainer.py + trainer_config.py\n"
        "```\n"
    )
    assert named_modules(text) == {
        "keys.py",
        "collectors/worker/actor.py",
        "collectors/worker/env_config.py",
        "collectors/ray_collector.py",
        "engine/trainer.py",
        "engine/trainer_config.py",
    }
