"""benchmarks/torchrl_clients: torchrl's client scripts, patched at run time, import swapped.

Without a pytorch/rl checkout (CI has none, and no network) these tests check the patch
machinery on texts written here, the runner's plumbing on a synthetic tree built from the
patches' own snippets, and that the runner skips cleanly when it has no source. With
``TORCHRL_SRC`` naming a pytorch/rl checkout they also check every patch against the real
files and run ``ray_collect.py`` end to end with tdscheme's class.
"""

from __future__ import annotations

import doctest
import importlib.util
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest
import torch

CLIENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "torchrl_clients"


def _load_runner():
    spec = importlib.util.spec_from_file_location("torchrl_clients_run", CLIENTS / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # puts the modules beside it on sys.path
    return module


run = _load_runner()
import client_scripts  # noqa: E402  (beside run.py, on sys.path once it is loaded)
import patching  # noqa: E402
import torch_resize  # noqa: E402
import torchrl_source  # noqa: E402
from patching import Patch, PatchError  # noqa: E402

TORCHRL_SRC = os.environ.get("TORCHRL_SRC")
needs_checkout = pytest.mark.skipif(not TORCHRL_SRC, reason="TORCHRL_SRC names no checkout")
SCRIPTS = client_scripts.client_scripts()


# -- the patch machinery, on texts written here ----------------------------------------------


def test_a_patch_applies_once_and_leaves_the_rest():
    texts = {"a.py": "x = 1\n    total_frames=10000,\ny = 2\n", "b.py": "untouched\n"}
    patch = Patch("a.py", "fewer-frames", "total_frames=10000,", "total_frames=2000,", "small")
    out = patching.apply_patches(texts, [patch], origin="test")
    assert out == {"a.py": "x = 1\n    total_frames=2000,\ny = 2\n", "b.py": "untouched\n"}
    assert texts["a.py"].count("10000") == 1  # the input is not changed


@pytest.mark.parametrize("times", [0, 2])
def test_a_patch_that_matches_zero_or_two_times_raises_naming_it(times):
    text = "head\n" + "total_frames=10000,\n" * times
    patch = Patch("a.py", "fewer-frames", "total_frames=10000,", "total_frames=2000,", "small")
    with pytest.raises(PatchError) as caught:
        patching.apply_patches({"a.py": text}, [patch], origin="pytorch/rl at abc123")
    message = str(caught.value)
    assert "'fewer-frames'" in message and "a.py" in message and "abc123" in message
    assert f"matches {times} times" in message


def test_a_patch_for_a_missing_file_raises_naming_it():
    patch = Patch("utils.py", "resize", "Resize(84, 84)", "resize_transform(84, 84)", "why")
    with pytest.raises(PatchError, match="'resize'.*'utils.py'"):
        patching.apply_patches({"a.py": "Resize(84, 84)"}, [patch], origin="test")


def test_patches_apply_in_order():
    first = Patch("a.py", "first", "a = 1\n", "a = 1\nb = 2\n", "adds b")
    second = Patch("a.py", "second", "b = 2\n", "b = 3\n", "changes what the first added")
    assert patching.apply_patches({"a.py": "a = 1\n"}, [first, second], origin="t") == {
        "a.py": "a = 1\nb = 3\n"
    }


def test_the_swap_changes_one_line_and_keeps_its_indentation():
    old = "from torchrl.collectors.distributed import RayCollector"
    text = f"import torch\n\ndef main():\n    {old}\n    x = 1\n"
    swapped = patching.swap_import(text, old, client_scripts.TDSCHEME_IMPORT)
    assert (
        swapped == "import torch\n\ndef main():\n    from tdscheme import RayCollector\n    x = 1\n"
    )
    assert patching.changed_lines(text, swapped) == [
        (f"    {old}", "    from tdscheme import RayCollector")
    ]
    for bad in ("x = 1\n", text + text):
        with pytest.raises(PatchError, match="expected exactly one"):
            patching.swap_import(bad, old, "y")


def test_the_doc_examples_hold():
    for module in (patching, client_scripts, torchrl_source, torch_resize):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__


def test_the_readme_names_every_patch():
    readme = (CLIENTS / "README.md").read_text()
    names = {p.name for c in SCRIPTS for p in c.patches}
    assert [n for n in sorted(names) if f"`{n}`" not in readme] == []


# -- the runner's plumbing, on a tree built from the patches' own snippets -------------------


def _synthetic_tree(root: Path) -> Path:
    """A pytorch/rl-shaped tree whose files hold each patch's snippet and the import line."""
    for client in SCRIPTS:
        folder = root / client.folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in client.files:
            parts = [p.old.rstrip("\n") for p in client.patches if p.file == name]
            made_by_a_patch = any(client.torchrl_import in p.new for p in client.patches)
            if name == client.script and not made_by_a_patch:
                parts.insert(0, client.torchrl_import)
            (folder / name).write_text("\n".join(["# synthetic", *parts]) + "\n")
    return root


@pytest.mark.parametrize("client", SCRIPTS, ids=lambda c: c.name)
def test_each_script_runs_patched_and_differs_from_its_tdscheme_run_by_the_import_alone(
    client, tmp_path
):
    source = torchrl_source.from_checkout(_synthetic_tree(tmp_path / "rl"))
    assert source.ref == "unknown: not a git checkout"
    (tmp_path / "torchrl").mkdir()
    (tmp_path / "tdscheme").mkdir()
    ours = run.prepare(client, source, "torchrl", tmp_path / "torchrl")
    theirs = run.prepare(client, source, "tdscheme", tmp_path / "tdscheme")
    assert [p.new in (ours.parent / p.file).read_text() for p in client.patches] == [True] * len(
        client.patches
    )
    changed = patching.changed_lines(ours.read_text(), theirs.read_text())
    assert [(a.strip(), b.strip()) for a, b in changed] == [
        (client.torchrl_import, client_scripts.TDSCHEME_IMPORT)
    ]
    for name in client.files[1:]:
        assert (ours.parent / name).read_text() == (theirs.parent / name).read_text()
    assert sorted(m for m in client.modules if (theirs.parent / m).is_file()) == sorted(
        client.modules
    )


def test_a_patch_that_no_longer_applies_names_the_script_the_patch_and_the_source(tmp_path):
    root = _synthetic_tree(tmp_path / "rl")
    client = next(c for c in SCRIPTS if c.name == "ray_collect")
    script = root / client.folder / client.script
    script.write_text(script.read_text().replace("10000", "20000"))
    source = torchrl_source.from_checkout(root)
    with pytest.raises(PatchError, match=r"'fewer-frames'.*ray_collect\.py.*not a git checkout"):
        run.prepare(client, source, "torchrl", tmp_path)


def test_a_tree_without_the_scripts_is_refused(tmp_path):
    with pytest.raises(torchrl_source.SourceUnavailable, match="lacks examples/distributed"):
        torchrl_source.from_checkout(tmp_path)


def test_an_sdist_without_the_scripts_is_refused_naming_the_way_out(tmp_path):
    archive = tmp_path / "torchrl-0.0.1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("torchrl-0.0.1/setup.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    with pytest.raises(torchrl_source.SourceUnavailable) as caught:
        torchrl_source.open_sdist(archive, tmp_path / "unpacked")
    message = str(caught.value)
    assert "torchrl-0.0.1.tar.gz" in message and "--torchrl-src" in message
    assert "sha256" in message


def test_without_a_source_the_runner_skips_with_a_clear_message_and_exit_0(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("TORCHRL_SRC", raising=False)
    out = tmp_path / "clients.md"
    argv = ["--scripts", "ray_collect", "--log-dir", str(tmp_path), "--out", str(out)]
    assert run.main(argv) == 0
    printed = capsys.readouterr()
    assert "no torchrl source given" in printed.err and "--torchrl-src" in printed.err
    lines = [json.loads(x) for x in printed.out.splitlines() if x.startswith("{")]
    assert [(x["script"], x["peer"], x["outcome"]) for x in lines] == [
        ("ray_collect.py", "torchrl", "skip"),
        ("ray_collect.py", "tdscheme", "skip"),
    ]
    assert out.read_text().startswith("torchrl scripts: none (no torchrl source given")


def test_a_script_runs_with_its_folder_first_on_pythonpath(tmp_path, monkeypatch):
    # Ray workers inherit it: how they import torch_resize once hydra has moved the driver
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert run.script_env(tmp_path)["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]


def test_the_torch_resize_keeps_a_flat_image_flat_and_resizes_every_leading_dim():
    pixels = torch.full((2, 3, 4, 210, 160), 0.5)
    out = torch_resize.resize_pixels(pixels, rows=84, cols=84)
    assert out.shape == (2, 3, 4, 84, 84)
    torch.testing.assert_close(out, torch.full_like(out, 0.5))
    assert torch_resize.resize_pixels(out, rows=84, cols=84) is out


# -- with a pytorch/rl checkout (TORCHRL_SRC) ------------------------------------------------


@needs_checkout
@pytest.mark.parametrize("client", SCRIPTS, ids=lambda c: c.name)
def test_every_patch_applies_to_the_real_files(client):
    source = torchrl_source.from_checkout(TORCHRL_SRC)
    ours = run.patched_texts(client, source, "torchrl")
    theirs = run.patched_texts(client, source, "tdscheme")  # checks the swap is the only change
    assert ours.keys() == theirs.keys() == set(client.files)


@needs_checkout
def test_ray_collect_runs_with_tdschemes_class(tmp_path):
    """The script in a fresh process with its own Ray: ~20 s on a quiet 2-core machine."""
    client = next(c for c in SCRIPTS if c.name == "ray_collect")
    source = torchrl_source.from_checkout(TORCHRL_SRC)
    result = run.run_once(client, source, "tdscheme", tmp_path, timeout_s=240.0)
    log = Path(result.log).read_text(errors="replace")
    assert result.outcome == "ok", f"{result.failure}\n{log[-3000:]}"
    assert "batch 10, total frames 2000" in log, log[-3000:]
