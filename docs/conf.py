"""Sphinx configuration of tdscheme's documentation site.

Build it (warnings are errors, as in CI's ``tests/test_docs.py``)::

    .venv/bin/pip install -c constraints.txt -e '.[docs]'
    .venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import tdscheme  # noqa: E402  (installed with -e; the version below is the package's)

project = "tdscheme"
author = "tdscheme developers"
copyright = "tdscheme developers, MIT License"  # noqa: A001  (Sphinx's name)
release = tdscheme.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "api_pages",  # docs/_ext/api_pages.py: the API pages from __all__, alias references
    "repo_includes",  # docs/_ext/repo_includes.py: links of included repository files
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
# ARCHITECTURE.md is a page of the repository too: architecture.md includes it
exclude_patterns = ["_build", "_templates", "_ext", "ARCHITECTURE.md"]
root_doc = "index"

# -- cross-references: every one must resolve (internal links checked by -W) --------------------
nitpicky = True
# No intersphinx: CI has no network. Names of the libraries tdscheme builds on (in signatures and
# docstrings) cannot resolve, so they are the one family of references left unchecked.
_EXTERNAL = r"(torch|torchrl|tensordict|ray|numpy|np|gymnasium|gym|envpool|typing|typing_extensions|collections|concurrent|logging|pathlib|os|threading|multiprocessing|argparse|enum|dataclasses|abc|types|functools|matplotlib|tqdm)"
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL + r"(\..*)?"),
]
# References that do not resolve for a reason in a docstring of tdscheme/ (fixed there, not here:
# the docs only name them). api_pages already links or shows as code every name that exists as
# written, from its module, from the object's defining module or from a parent package.
nitpick_ignore = [
    # type names imported under TYPE_CHECKING only (absent at run time), in signatures
    *[
        ("py:class", name)
        for name in (
            "DEVICE_TYPING",
            "EnvBase",
            "EnvCreator",
            "ExplorationType",
            "ReplayBuffer",
            "TensorDictBase",
            "TensorDictModule",
            "WeightSyncScheme",
            "WeightUpdaterBase",
            "nn.Module",
            "SegmentTree",
            "Recording",
            "VideoClip",
            "FinishedEpisodes",
        )
    ],
    # Napoleon reads the first words of these one-line property docstrings ("X: ...") as a
    # return type: tdscheme/transport/payload.py Payload.nbytes, tdscheme/scheme/scheme.py
    # Scheme.last_episodes, tdscheme/rollout/lean.py LeanCollector.before_step,
    # tdscheme/replay/sharded.py ShardedReplayBuffer.prioritized
    *[
        ("py:class", words)
        for words in (
            "Bytes that cross the wire out",
            "band",
            "The episodes that ended in the last step",
            "called before each env step",
            "env configs",
            "the lean loop",
            "what the training loop and the learner read",
        )
    ],
    # names that exist nowhere under the path written (a renamed module, a method of another
    # class, an instance attribute): tdscheme/collectors/settings/config.py RayCollectorConfig,
    # tdscheme/collectors/settings/specs.py WorkerSpec, tdscheme/runtime/__init__.py,
    # tdscheme/collectors/ray_collector.py RayCollector.counters and .wait_for_env_config,
    # tdscheme/engine/checkpoint.py CheckpointManager, tdscheme/gradient_workers/config.py,
    # tdscheme/scheme/scheme.py Scheme, tdscheme/learner/__init__.py (write_state_values_),
    # tdscheme/runtime/ray_lease.py RayLease (acquire)
    ("py:mod", "tdscheme.collectors.torchrl_compat.args"),
    ("py:mod", "tdscheme.runtime.torchrl_names"),
    ("py:func", "tdscheme.runtime.torchrl_names.default_collector_kwargs"),
    ("py:meth", "report"),
    ("py:data", "PING_ROUND_S"),
    ("py:meth", "push"),
    ("py:meth", "set_seed"),
    ("py:meth", "start"),
    ("py:meth", "step"),
    ("py:attr", "directory"),
    ("py:attr", "frames"),
    ("py:func", "write_state_values_"),
    ("py:meth", "acquire"),
    ("py:class", "tdscheme.presets.offpolicy_modules.OffPolicyConfig"),  # presets/offpolicy.py
]

# -- autodoc / napoleon (Google-style docstrings) -------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# "Attributes:" as fields: autodoc documents a dataclass field whose default is a class as a
# member too (WorkerSpec.collector_class), which an attribute directive would duplicate
napoleon_use_ivar = True

# -- MyST (the guides are Markdown) ---------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- HTML ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"tdscheme {release}"
html_static_path: list[str] = []
