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
    {"keys", "validation", "log_levels", "facades", "errors", "finite", "stragglers", "episodes"},
    {"envs", "transport", "runtime"},
    {"rollout", "replay", "learner"},
    {"collectors", "gradient_workers"},
    {"scheme"},
    {"engine"},
    {"presets"},
    {"cli"},
]
#: Rooms of the ground floor that other ground-floor rooms may import (leaves).
GROUND_LEAVES = {"keys", "validation", "log_levels", "facades", "errors", "finite", "stragglers"}
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
CHECKED = sorted(m for m in MODULES if m != "tdscheme" and room_of(m) != "testing")


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
    rooms = {room_of(m) for m in MODULES if m != "tdscheme" and room_of(m) != "testing"}
    for room in rooms:
        floor_of(room)


#: Loose modules ``tdscheme/`` may hold beside ``__init__.py``; more, and
#: some of them belong together in a folder.
MAX_LOOSE_MODULES = 8


def test_the_package_root_holds_few_loose_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
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


def test_collectors_holds_only_the_collector_beside_its_folders():
    """``collectors/``: ``ray_collector.py``, and settings/, worker/, driver/, torchrl_compat/."""
    room = PACKAGE / "collectors"
    loose = sorted(p.name for p in room.glob("*.py"))
    folders = sorted(p.name for p in room.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert loose == ["__init__.py", "ray_collector.py"]
    assert folders == ["driver", "settings", "torchrl_compat", "worker"]


# -- no circles, and one way inside collectors/ -----------------------------------------------


def module_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every package module ``path`` imports, anywhere in it (in functions and
    ``TYPE_CHECKING`` blocks too): ``from a.b import c`` is ``a.b.c`` where that is a
    module, else ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            found.update(m for m in subs if m in modules)
            if any(m not in modules for m in subs):
                found.add(node.module)
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each holds a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


GRAPH = {m: module_imports(path, MODULES) - {m} for m, path in MODULES.items()}


def test_no_import_circles_in_the_package():
    """Type-only and function-level imports count: a circle is a circle to a reader."""
    assert import_circles(GRAPH) == []


def test_the_circle_check_sees_a_circle(tmp_path):
    """The negative controls: a type-only circle through three modules, and a lazy one."""
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    pkg = {"p.x": tmp_path / "x.py", "p.y": tmp_path / "y.py", "p": tmp_path / "i.py"}
    pkg["p.x"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import y\n"
    )
    pkg["p.y"].write_text("def f():\n    from p.x import g\n")
    graph = {m: module_imports(path, pkg) for m, path in pkg.items() if m != "p"}
    assert graph == {"p.x": {"p.y"}, "p.y": {"p.x"}}
    assert import_circles(graph) == [["p.x", "p.y"]]


#: ``collectors/``, bottom to top: a part imports its own level or those below it. worker/
#: and driver/ share a level and never import each other (the driver is given the actor
#: class by the collector that builds it).
COLLECTORS_LEVELS = {
    "settings": 0,
    "worker": 1,
    "driver": 1,
    "torchrl_compat": 2,
    "ray_collector": 3,
}


def collectors_part(module: str) -> str | None:
    """``tdscheme.collectors.driver.pool`` -> ``driver``; the package itself: ``None`` (top)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def collectors_climbs(graph: dict[str, set[str]]) -> list[str]:
    """Each import inside collectors/ that climbs a level or crosses worker/ and driver/."""
    wrong = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("tdscheme.collectors.") or collectors_part(module) is None:
            continue
        part = collectors_part(module)
        for target in sorted(targets):
            if not target.startswith("tdscheme.collectors"):
                continue
            other = collectors_part(target)
            if other is None:
                wrong.append(f"{module} -> {target} (the package facade)")
            elif other != part and (
                COLLECTORS_LEVELS[other] > COLLECTORS_LEVELS[part]
                or COLLECTORS_LEVELS[other] == COLLECTORS_LEVELS[part]
            ):
                wrong.append(f"{module} ({part}) -> {target} ({other})")
    return wrong


def test_collectors_is_one_way_bottom_to_top():
    assert collectors_climbs(GRAPH) == []


def test_the_collectors_check_sees_a_climb():
    """The negative controls: the settings importing the driver, the driver the worker."""
    graph = {
        "tdscheme.collectors.settings.config": {"tdscheme.collectors.driver.specs"},
        "tdscheme.collectors.driver.pool": {"tdscheme.collectors.worker.actor"},
        "tdscheme.collectors.torchrl_compat.state": {"tdscheme.collectors.driver.stats"},
    }
    assert collectors_climbs(graph) == [
        "tdscheme.collectors.driver.pool (driver) -> tdscheme.collectors.worker.actor (worker)",
        "tdscheme.collectors.settings.config (settings) -> tdscheme.collectors.driver.specs (driver)",
    ]


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
#: An import of the test kit anywhere in a text: code, a docstring example, a script in a
#: string, a Markdown page.
TEST_KIT_IN_TEXT = re.compile(
    r"(from tdscheme\.testing import|import tdscheme\.testing|"
    r"from tdscheme import (\w+, )*testing\b)",
    re.MULTILINE,
)


def imports_test_kit(path: Path) -> bool:
    """Whether a file imports ``tdscheme.testing``: in code (``ast``) or anywhere in its text."""
    text = path.read_text(encoding="utf-8")
    in_code = path.suffix == ".py" and "tdscheme.testing" in tdscheme_imports(path)
    return in_code or bool(TEST_KIT_IN_TEXT.search(text))


def user_facing_files() -> list[Path]:
    """Every file outside tests/ that could show or run an import: the package (but the kit
    itself), examples, benchmarks, the docs and the README."""
    files = [
        *PACKAGE.rglob("*.py"),
        *ROOT.joinpath("examples").rglob("*.py"),
        *ROOT.joinpath("benchmarks").rglob("*.py"),
        *ROOT.joinpath("docs").rglob("*.md"),
        ROOT / "README.md",
    ]
    return sorted(p for p in files if PACKAGE / "testing" not in p.parents)


def test_nothing_outside_tests_imports_the_test_kit():
    """What users read, copy and run (docstring examples included) uses the public API
    (``tdscheme.envs``, the presets), not ``tdscheme.testing``."""
    files = user_facing_files()
    assert any(p.parent.name == "examples" for p in files) and len(files) > 50
    offenders = [str(p.relative_to(ROOT)) for p in files if imports_test_kit(p)]
    assert offenders == [], f"{offenders} import tdscheme.testing; use tdscheme.envs / presets"


@pytest.mark.parametrize(
    "source",
    [
        "from tdscheme.testing import make_env\n",
        "def f():\n    import tdscheme.testing\n",
        "from tdscheme import envs, testing\n",
        'SCRIPT = """\nfrom tdscheme.testing import mlp_policy\n"""\n',
        '"""Example:\n    >>> from tdscheme.testing import make_env\n"""\n',
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


#: The longest a package module may be: past it, look for its second responsibility.
MAX_MODULE_LINES = 400
#: Modules that read better whole, each with its own limit and the reason it is one module.
LONGER_MODULES: dict[str, tuple[int, str]] = {
    "collectors/settings/config.py": (
        450, "every RayCollector setting declared, documented and checked in one dataclass"),
    "collectors/ray_collector.py": (
        450, "the public class: torchrl's RayCollector surface as documented one-line delegators"),
    "collectors/driver/pool.py": (
        450, "the driver's one Ray caller for collector actors: requests, restarts, pushes, acks"),
    "collectors/worker/actor.py": (
        450, "the actor's whole remote surface: the one class Ray exposes to the driver"),
    "runtime/actor_pool.py": (
        450, "every pool's Ray calls in one place (docs/ARCHITECTURE.md, 'Who calls Ray')"),
    "replay/sharded.py": (
        450, "the driver's one view of K shards: draws, priorities back, restarts, checkpoints"),
    "scheme/config.py": (
        450, "every setting of a run declared and documented once, and its one conversion"),
    "scheme/scheme.py": (
        450, "the public Scheme facade: documented delegators to the loop it holds"),
    "engine/trainer.py": (
        450, "the Trainer's run loop and public methods (its settings are trainer_config.py)"),
    "envs/env_config.py": (
        450, "the env-config protocol: each way an env takes a config, found through wrappers"),
    "collectors/driver/flow.py": (
        450, "BatchFlow, one class: an iteration's requests, order, preemption and stacking"),
    "replay/ray_held.py": (
        450, "torchrl's Ray-held buffer and the four things tdscheme adds around it, as listed"),
    "scheme/off_policy_loop.py": (
        450, "OffPolicyLoop, one class: both buffer locations' steps side by side"),
}  # fmt: skip


def module_limit(relative: str) -> int:
    return LONGER_MODULES.get(relative, (MAX_MODULE_LINES, ""))[0]


def test_no_package_module_is_over_the_limit():
    long = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines()))
        > module_limit(str(p.relative_to(PACKAGE)))
    }
    assert long == {}, f"modules over their limit ({MAX_MODULE_LINES} unless LONGER_MODULES): {long}"


def test_each_longer_module_exists_and_says_why():
    for relative, (limit, reason) in LONGER_MODULES.items():
        assert (PACKAGE / relative).is_file(), f"LONGER_MODULES names {relative}, which is gone"
        assert limit > MAX_MODULE_LINES and len(reason) > 20, relative
