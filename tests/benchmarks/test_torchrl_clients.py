"""benchmarks/torchrl_clients: torchrl's client scripts, with only the import changed.

The swap is checked on every copy (one line, nothing else); ``ray_collect.py`` then runs end
to end with tdscheme's class, in its own process and Ray, as ``run.py`` runs it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "torchrl_clients"


def _load_runner():
    spec = importlib.util.spec_from_file_location("torchrl_clients_run", CLIENTS / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


run = _load_runner()


def test_swap_import_replaces_the_one_line_and_keeps_its_indentation():
    text = "import torch\n    from torchrl.collectors.distributed import RayCollector\nx = 1\n"
    swapped = run.swap_import(
        text,
        "from torchrl.collectors.distributed import RayCollector",
        "from tdscheme import RayCollector",
    )
    assert swapped == "import torch\n    from tdscheme import RayCollector\nx = 1\n"
    for bad in ("x = 1\n", text + text):
        with pytest.raises(ValueError, match="expected exactly one"):
            run.swap_import(bad, "from torchrl.collectors.distributed import RayCollector", "y")


@pytest.mark.parametrize("client", run.SCRIPTS, ids=lambda c: c.name)
def test_each_copy_differs_from_its_tdscheme_run_by_the_import_alone(client, tmp_path):
    original = (CLIENTS / client.folder / client.script).read_text().splitlines()
    swapped = run.prepare(client, "tdscheme", tmp_path).read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, swapped, strict=True) if a != b]
    assert [(a.strip(), b.strip()) for a, b in changed] == [
        (client.torchrl_import, run.TDSCHEME_IMPORT)
    ]
    assert "Copied from pytorch/rl" in "\n".join(original[:8])


def test_ray_collect_runs_with_tdschemes_class(tmp_path):
    """The script in a fresh process with its own Ray: ~18 s of CPU, ~20 s on a quiet 2-core box."""
    client = next(c for c in run.SCRIPTS if c.name == "ray_collect.py")
    if run.missing(client):
        pytest.skip(f"ray_collect.py needs {run.missing(client)}")
    result = run.run_once(client, "tdscheme", tmp_path, timeout_s=240.0)
    log = Path(result.log).read_text(errors="replace")
    assert result.outcome == "ok", f"{result.failure}\n{log[-3000:]}"
    assert "batch 10, total frames 2000" in log, log[-3000:]
