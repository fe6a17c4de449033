"""Where torchrl's client scripts come from at run time: a pytorch/rl checkout, or an sdist.

Nothing of pytorch/rl is kept in this repository. :func:`from_checkout` takes a pytorch/rl
tree given on the command line and records its git commit; :func:`from_sdist` asks the
package index for torchrl's source distribution (``pip download --no-binary :all:``) and
unpacks it. Either way the tree must hold every file the scripts need
(:func:`client_scripts.required_files`), else :class:`SourceUnavailable` says what is missing
and how to give a checkout instead.

torchrl's own wheels do not serve: they leave out ``examples/``, and while torchrl 0.14.1's
wheel installs ``sota-implementations/impala/*.py`` into site-packages, it leaves out the
IMPALA config (``config_multi_node_ray.yaml``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from client_scripts import required_files

#: What to tell a user who has no source.
HOW_TO_GET_ONE = (
    "pass --torchrl-src PATH (or set TORCHRL_SRC): a pytorch/rl checkout at the installed "
    "torchrl's release, e.g. git clone https://github.com/pytorch/rl && git -C rl checkout "
    "373c31a85b30be19e5e1db5c466f25d15522ac98 (0.14.0, the commit the patches were written for)"
)
#: Why the sdist route is expected to fail (checked in pytorch/rl at 373c31a85).
NO_SDIST_EXPECTED = (
    "torchrl's release workflow (.github/workflows/release.yml at 373c31a85) uploads wheels "
    "only, and its MANIFEST.in names no examples/ or sota-implementations/"
)


class SourceUnavailable(RuntimeError):
    """No pytorch/rl tree with the client scripts could be had; the message says why."""


@dataclass(frozen=True)
class TorchrlSource:
    """A pytorch/rl tree holding the client scripts, and how it was obtained.

    Attributes:
        root: the tree's root (holding ``examples/`` and ``sota-implementations/``).
        kind: ``"checkout"`` or ``"sdist"``.
        ref: the git commit (``"unknown: not a git checkout"`` when ``root`` is not the top of
            a git work tree), or the sdist's file name.
        sha256: the sdist's digest; empty for a checkout.
        dirty: whether the checkout's script folders differ from its commit.
    """

    root: Path
    kind: str
    ref: str
    sha256: str = ""
    dirty: bool = False

    def describe(self) -> dict[str, str | bool]:
        """The source as a JSON-ready dict, for each result line.

        Example:
            >>> TorchrlSource(Path("/rl"), "checkout", "abc").describe()["commit"]
            'abc'
        """
        if self.kind == "checkout":
            return {
                "kind": "checkout",
                "path": str(self.root),
                "commit": self.ref,
                "dirty": self.dirty,
            }
        return {"kind": "sdist", "file": self.ref, "sha256": self.sha256}

    def origin(self) -> str:
        """One line naming the source, for errors and the markdown output.

        Example:
            >>> TorchrlSource(Path("/rl"), "checkout", "abc").origin()
            'pytorch/rl checkout /rl at commit abc'
        """
        if self.kind == "checkout":
            dirty = " (with local changes)" if self.dirty else ""
            return f"pytorch/rl checkout {self.root} at commit {self.ref}{dirty}"
        return f"torchrl sdist {self.ref} (sha256 {self.sha256})"


def missing_files(root: Path) -> list[str]:
    """The files the client scripts need that ``root`` lacks, relative to it."""
    return [name for name in required_files() if not (root / name).is_file()]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def from_checkout(path: str | Path) -> TorchrlSource:
    """The pytorch/rl tree at ``path``, with its git commit when it is a checkout.

    Args:
        path: the repository root (holding ``examples/`` and ``sota-implementations/``).

    Returns:
        The source; ``ref`` is ``git rev-parse HEAD`` there.

    Raises:
        SourceUnavailable: a needed file is missing under ``path``.
    """
    root = Path(path).expanduser().resolve()
    lacking = missing_files(root)
    if lacking:
        raise SourceUnavailable(f"{root} is no pytorch/rl tree: it lacks {', '.join(lacking)}")
    top = _git(root, "rev-parse", "--show-toplevel")
    commit = _git(root, "rev-parse", "HEAD")
    # a tree unpacked inside some other repository must not report that repository's commit
    if commit is None or top is None or Path(top).resolve() != root:
        return TorchrlSource(root, "checkout", "unknown: not a git checkout")
    folders = sorted({name.rsplit("/", 1)[0] for name in required_files()})
    status = _git(root, "status", "--porcelain", "--", *folders)
    return TorchrlSource(root, "checkout", commit, dirty=bool(status))


def sha256_of(path: Path) -> str:
    """The hex sha256 digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def open_sdist(archive: Path, into: Path) -> TorchrlSource:
    """Unpacks a torchrl sdist into ``into`` and checks that it holds the client scripts.

    Args:
        archive: the ``torchrl-<version>.tar.gz`` file.
        into: an empty or reusable folder; the archive's top folder lands inside it.

    Returns:
        The source, with the archive's name and sha256.

    Raises:
        SourceUnavailable: the archive lacks a needed file.
    """
    with tarfile.open(archive) as tar:
        tops = {member.name.split("/", 1)[0] for member in tar.getmembers()}
        tar.extractall(into, filter="data")
    digest = sha256_of(archive)
    roots = [into / top for top in sorted(tops) if (into / top).is_dir()]
    root = roots[0] if len(roots) == 1 else into
    lacking = missing_files(root)
    if lacking:
        raise SourceUnavailable(
            f"{archive.name} (sha256 {digest}) holds no {', '.join(lacking)} "
            f"({NO_SDIST_EXPECTED}); {HOW_TO_GET_ONE}"
        )
    return TorchrlSource(root, "sdist", archive.name, sha256=digest)


def from_sdist(version: str, cache_dir: Path, *, timeout_s: float = 300.0) -> TorchrlSource:
    """Downloads torchrl ``version``'s sdist with pip into ``cache_dir`` and unpacks it there.

    Args:
        version: the torchrl version (the installed one, so the scripts match the package).
        cache_dir: where the archive and its unpacked tree are kept between runs.
        timeout_s: how long pip may take.

    Returns:
        The source, with the archive's name and sha256.

    Raises:
        SourceUnavailable: pip found no sdist (or failed), or the sdist lacks a needed file.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive = cache_dir / f"torchrl-{version}.tar.gz"
    if not archive.is_file():
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "--no-build-isolation", "--retries", "1", "--timeout", "15",
            "-d", str(cache_dir), f"torchrl=={version}",
        ]  # fmt: skip
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SourceUnavailable(
                f"pip download of torchrl=={version}: no answer in {timeout_s:.0f} s; "
                f"{HOW_TO_GET_ONE}"
            ) from None
        if out.returncode != 0 or not archive.is_file():
            last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SourceUnavailable(
                f"no torchrl=={version} sdist from the package index ({last}); "
                f"{NO_SDIST_EXPECTED}; {HOW_TO_GET_ONE}"
            )
    return open_sdist(archive, cache_dir / "unpacked")
