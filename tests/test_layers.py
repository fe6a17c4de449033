"""Imports point one way through the package's layers (docs/ARCHITECTURE.md).

Read from the source with ``ast`` (nothing is imported): a module may import its
own room and the rooms of lower floors; the peers of one floor (collectors,
gradient workers) do not import each other; collectors do not import the learner
(collection never needs it; gradient workers do, each owns a learner copy);
nothing in the package but the test kit itself imports ``tdscheme.testing``.
Inside collectors, the folder says the process: ``collectors/worker/`` (the actor)
never imports ``collectors/driver/``; ``rollout/`` (used by collector and gradient
workers) imports no Ray, not even through the modules it imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tdscheme"

#: Floors, lowest first: a room may import rooms on its own floor only where noted.
FLOORS: list[set[str]] = [
    {"keys", "validation", "log_levels", "lazy", "errors", "finite", "stragglers", "episodes"},
    {"envs", "transport", "runtime"},
    {"rollout", "replay", "learner"},
    {"collectors", "gradient_workers"},
    {"scheme"},
    {"engine"},
    {"presets"},
    {"cli"},
]
#: Rooms of the ground floor that other ground-floor rooms may import (leaves).
GROUND_LEAVES = {"keys", "validation", "log_levels", "lazy", "errors", "finite", "stragglers"}
#: Downward imports that are still wrong: (importer's room, imported room).
FORBIDDEN = {("collectors", "learner")}


def room_of(module: str) -> str:
    """``tdscheme.collectors.driver.pool`` -> ``collectors``; ``tdscheme.keys`` -> ``keys``."""
    return module.split(".")[1]


def floor_of(room: str) -> int:
    for floor, rooms in enumerate(FLOORS):
        if room in rooms:
            return floor
    raise AssertionError(f"room {room!r} is on no floor; add it to FLOORS and the docs")


def package_modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def tdscheme_imports(path: Path) -> set[str]:
    """Every ``tdscheme.*`` module a file imports (anywhere in it, lazily too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tdscheme."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tdscheme":
                found.update(f"tdscheme.{a.name}" for a in node.names)
            elif node.module.startswith("tdscheme."):
                found.add(node.module)
    return found


MODULES = package_modules()
CHECKED = sorted(m for m in MODULES if m not in ("tdscheme", "tdscheme.testing"))


@pytest.mark.parametrize("module", CHECKED)
def test_imports_point_down(module):
    room = room_of(module)
    floor = floor_of(room)
    wrong = []
    for target in sorted(tdscheme_imports(MODULES[module])):
        target_room = room_of(target)
        if target_room == "testing":
            wrong.append(f"{target} (the test kit; production code must not import it)")
            continue
        if target_room == room:
            continue
        target_floor = floor_of(target_room)
        same_floor_ok = floor == 0 and target_room in GROUND_LEAVES
        upward = target_floor > floor or (target_floor == floor and not same_floor_ok)
        if upward or (room, target_room) in FORBIDDEN:
            wrong.append(f"{target} (floor {target_floor}, {target_room})")
    assert not wrong, f"{module} (floor {floor}, {room}) imports against the layers: {wrong}"


def test_every_room_is_on_a_floor():
    rooms = {room_of(m) for m in MODULES if m not in ("tdscheme", "tdscheme.testing")}
    for room in rooms:
        floor_of(room)


#: Loose modules ``tdscheme/`` may hold beside ``__init__.py`` and ``testing.py``; more, and
#: some of them belong together in a folder.
MAX_LOOSE_MODULES = 8


def test_the_package_root_holds_few_loose_modules():
    loose = sorted(
        p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "testing.py")
    )
    assert len(loose) <= MAX_LOOSE_MODULES, (
        f"tdscheme/ holds {len(loose)} loose modules (at most {MAX_LOOSE_MODULES}): {loose}; "
        "group the ones that belong together in a folder"
    )


def test_the_checker_sees_a_wrong_import(tmp_path):
    """The negative control: an upward import is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("from tdscheme.scheme import Scheme\nimport tdscheme.testing\n")
    assert tdscheme_imports(bad) == {"tdscheme.scheme", "tdscheme.testing"}


def _closure(module: str) -> set[str]:
    """``module`` and every package module it imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or name not in MODULES:
            continue
        seen.add(name)
        todo.extend(tdscheme_imports(MODULES[name]))
    return seen


def _imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            return True
    return False


WORKER_SIDE = sorted(m for m in MODULES if m.startswith("tdscheme.collectors.worker"))
ROLLOUT = sorted(m for m in MODULES if m.startswith("tdscheme.rollout"))


@pytest.mark.parametrize("module", WORKER_SIDE)
def test_the_worker_side_never_imports_the_driver_side(module):
    """What runs in the actor does not import what runs in the driver process."""
    wrong = sorted(m for m in _closure(module) if m.startswith("tdscheme.collectors.driver"))
    assert not wrong, f"{module} imports the driver's side: {wrong}"


@pytest.mark.parametrize("module", ROLLOUT)
def test_the_rollout_imports_no_ray(module):
    """The rollout runs in collector and gradient workers alike, and in tests without Ray."""
    wrong = sorted(m for m in _closure(module) if _imports_ray(MODULES[m]))
    assert not wrong, f"{module} imports Ray through {wrong}"


def test_collectors_holds_only_the_collector_and_its_config_beside_its_folders():
    """``collectors/``: ``ray_collector.py``, ``config.py``, and worker/, driver/, torchrl_compat/."""
    room = PACKAGE / "collectors"
    loose = sorted(p.name for p in room.glob("*.py"))
    folders = sorted(p.name for p in room.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert loose == ["__init__.py", "config.py", "ray_collector.py"]
    assert folders == ["driver", "torchrl_compat", "worker"]


def test_the_closure_checks_see_ray_and_the_driver(tmp_path):
    """The negative controls: a Ray import and a driver import are found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import ray.util\n")
    assert _imports_ray(bad)
    assert any(
        m.startswith("tdscheme.collectors.driver")
        for m in _closure("tdscheme.collectors.ray_collector")
    )
    assert any(_imports_ray(MODULES[m]) for m in _closure("tdscheme.collectors.worker.actor"))


ROOT = PACKAGE.parent
#: torchrl's own client scripts, copied as they are, are not ours to change.
USER_FACING_EXCLUDED = {ROOT / "benchmarks" / "torchrl_clients"}
#: An import of the test kit written inside a string (a script a benchmark runs with ``-c``).
TEST_KIT_IN_TEXT = re.compile(
    r"^\s*(from tdscheme\.testing import|import tdscheme\.testing|"
    r"from tdscheme import (\w+, )*testing\b)",
    re.MULTILINE,
)


def imports_test_kit(path: Path) -> bool:
    """Whether a file imports ``tdscheme.testing``, in code (``ast``) or in an embedded script."""
    text = path.read_text(encoding="utf-8")
    return "tdscheme.testing" in tdscheme_imports(path) or bool(TEST_KIT_IN_TEXT.search(text))


def user_facing_files() -> list[Path]:
    """Every Python file under ``examples/`` and ``benchmarks/`` but torchrl's client scripts."""
    files = [*ROOT.joinpath("examples").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py")]
    return sorted(p for p in files if not any(p.is_relative_to(x) for x in USER_FACING_EXCLUDED))


def test_examples_and_benchmarks_do_not_import_the_test_kit():
    """What users copy and what measures the library use its public API, not ``tdscheme.testing``."""
    files = user_facing_files()
    assert any(p.parent.name == "examples" for p in files) and len(files) > 5
    offenders = [str(p.relative_to(ROOT)) for p in files if imports_test_kit(p)]
    assert offenders == [], f"{offenders} import tdscheme.testing; use tdscheme.envs / presets"


@pytest.mark.parametrize(
    "source",
    [
        "from tdscheme.testing import make_env\n",
        "def f():\n    import tdscheme.testing\n",
        "from tdscheme import envs, testing\n",
        'SCRIPT = """\nfrom tdscheme.testing import mlp_policy\n"""\n',
    ],
)
def test_the_test_kit_check_sees_an_import(tmp_path, source):
    """The negative control: each way of importing the test kit is found."""
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert imports_test_kit(bad)
    good = tmp_path / "good.py"
    good.write_text('"""Not ``tdscheme.testing``."""\nfrom tdscheme.envs import make_env\n')
    assert not imports_test_kit(good)
