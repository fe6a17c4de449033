"""Writes the API reference's pages from the package's ``__all__`` lists, and resolves aliases.

Two jobs, both at build time, so the reference can never drift from the code:

* ``config-inited``: one page per public package (``docs/api/<package>.rst``, generated and
  git-ignored) with an ``autosummary`` of every name in its ``__all__``. Each object gets its
  own page once, under the first package that exports it (``tdscheme`` first, so
  ``tdscheme.RayCollector`` is the page); a later package that re-exports it links to that
  page.
* ``missing-reference``: a cross-reference to another import path of a documented object
  (``tdscheme.collectors.RayCollector``, a lazy export, a name relative to the defining
  module) links to its page; one to an object that exists but has no page (an internal
  module, torch's and torchrl's classes) is shown as code; one to nothing is left to Sphinx,
  which warns (an error under ``-W``). See :func:`resolve_reference`.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Packages and modules whose ``__all__`` the reference covers, in the order that decides where
#: an object exported twice is documented. Subpackages are appended in ``pkgutil`` order.
FIRST = ["tdscheme", "tdscheme.errors", "tdscheme.keys"]
#: Left out, with the reason (stated on the API page too).
EXCLUDED = {
    "tdscheme.testing": "deterministic policies and faulty envs for the project's tests only",
}


def public_packages(root: str = "tdscheme") -> list[str]:
    """The documented packages: :data:`FIRST`, then every subpackage with an ``__all__``."""
    names = list(FIRST)
    package = importlib.import_module(root)
    for info in pkgutil.walk_packages(package.__path__, f"{root}."):
        if not info.ispkg or info.name in EXCLUDED or info.name in names:
            continue
        if getattr(importlib.import_module(info.name), "__all__", None):
            names.append(info.name)
    return names


def write_pages(out_dir: Path) -> list[str]:
    """Writes ``out_dir/<package>.rst`` for every public package; returns the packages."""
    out_dir.mkdir(parents=True, exist_ok=True)
    documented: dict[int, str] = {}
    packages = public_packages()
    for package_name in packages:
        module = importlib.import_module(package_name)
        own, aliases = [], []
        for name in module.__all__:
            if name.startswith("__"):  # __version__: said on the API page, not a page of its own
                continue
            value = getattr(module, name)
            # constants (tuples, strings) get a page in every package that exports them
            key = id(value) if isinstance(value, type) or callable(value) else id(object())
            if key in documented:
                aliases.append((name, documented[key]))
            else:
                documented[key] = f"{package_name}.{name}"
                own.append(name)
        lines = [f"``{package_name}``", "=" * (len(package_name) + 4), ""]
        lines += [f".. automodule:: {package_name}", "   :no-members:", ""]
        lines += [f".. currentmodule:: {package_name}", ""]
        if own:
            lines += [".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
            lines += [f"   {name}" for name in own] + [""]
        if aliases:
            lines += ["Also exported here, documented where first exported:", ""]
            lines += [f"* ``{name}``: :py:obj:`{target}`" for name, target in aliases] + [""]
        text = "\n".join(lines)
        path = out_dir / f"{package_name}.rst"
        if not path.exists() or path.read_text() != text:  # unchanged pages stay unchanged
            path.write_text(text)
    return packages


def _resolve_object(target: str) -> Any:
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                value = getattr(value, attr)
        except AttributeError:
            return None
        return value
    return None


#: id(object) -> the name of its page, built once per process at the first missing reference
#: (ids mean nothing in another process, so never kept on the pickled build environment).
_DOCUMENTED: dict[int, str] = {}


def _documented_by_id(env: Any) -> dict[int, str]:
    if not _DOCUMENTED:
        for name in env.get_domain("py").objects:
            value = _resolve_object(name)
            if value is not None and (isinstance(value, type) or callable(value)):
                _DOCUMENTED.setdefault(id(value), name)
    return _DOCUMENTED


def _candidates(node: Any) -> list[str]:
    """The import paths a reference may mean: as written, then from its module and class."""
    target, module, cls = node["reftarget"], node.get("py:module"), node.get("py:class")
    names = [target]
    if module and cls:
        names.append(f"{module}.{cls}.{target}")
    if module:
        names.append(f"{module}.{target}")
    # on an object's own page (api/generated/<name>), the module that defines the object: the
    # names its signature and docstring use are that module's (a class's members' too)
    page_object = _resolve_object(node["refdoc"].rsplit("/", 1)[-1])
    defining = getattr(page_object, "__module__", None)
    while defining:  # the defining module, then its packages (a name relative to the package)
        names.append(f"{defining}.{target}")
        defining = defining.rpartition(".")[0]
    return names


def resolve_reference(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolves a ``py`` reference that names an existing object by another path.

    * The object is documented under another name (``tdscheme.collectors.RayCollector``,
      ``Learner`` from inside ``tdscheme.learner``, a lazy export): a link to its page.
    * The object exists but has no page (an internal module, a torchrl or torch class): the
      name is shown as code, unlinked, and counted in the build's closing summary.
    * Nothing of that name exists: left to Sphinx, which warns (an error under ``-W``).
    """
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    for name in _candidates(node):
        value = _resolve_object(name)
        if value is None:
            continue
        if isinstance(value, type) or callable(value):
            documented = _documented_by_id(env).get(id(value))
            if documented is not None:
                for reftype in (node["reftype"], "obj"):  # a class named through :func: too
                    found = domain.resolve_xref(
                        env, node["refdoc"], app.builder, reftype, documented, node, contnode
                    )
                    if found is not None:
                        return found
        _UNLINKED.add(name)
        return contnode
    return None


_UNLINKED: set[str] = set()


def _summary(app: Any, exception: Exception | None) -> None:
    if exception is None and _UNLINKED:
        logger.info(
            "api_pages: %d references to existing objects without a page shown as code",
            len(_UNLINKED),
        )


def setup(app: Any) -> dict[str, Any]:
    def on_config(app: Any, config: Any) -> None:
        write_pages(Path(app.srcdir) / "api")

    app.connect("config-inited", on_config)
    app.connect("missing-reference", resolve_reference)
    app.connect("build-finished", _summary)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
