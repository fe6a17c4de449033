"""Named textual patches for a peer's script, each checked to apply exactly once.

A benchmark that runs a peer's script fetches it at run time and changes it there. Each change
is a :class:`Patch`: a snippet of the script, the text that replaces it and a one-line reason.
A patch whose snippet is missing, or found more than once, means the script is not the one the
patch was written for: :func:`apply_patches` then raises :class:`PatchError` naming the file,
the patch and where the script came from, rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class PatchError(ValueError):
    """A patch (or the import swap) does not match its script exactly once."""


@dataclass(frozen=True)
class Patch:
    """One change to one file of a peer's script: ``old`` becomes ``new``, for ``reason``.

    Attributes:
        file: the file the patch is for, relative to the script's folder.
        name: a short identifier, used in errors and in the README.
        old: the exact text to find (indentation and line breaks included); it must occur once.
        new: the text that replaces it (empty to delete).
        reason: one line on why the script needs the change.

    Example:
        >>> p = Patch("a.py", "fewer-frames", "total=10", "total=2", "a 2-core machine")
        >>> apply_patches({"a.py": "x = 1\\ntotal=10\\n"}, [p], origin="demo")["a.py"]
        'x = 1\\ntotal=2\\n'
    """

    file: str
    name: str
    old: str
    new: str
    reason: str


def apply_patches(
    texts: dict[str, str], patches: Iterable[Patch], *, origin: str
) -> dict[str, str]:
    """The files in ``texts`` with each patch applied in turn.

    Args:
        texts: file name (relative to the script's folder) to its text.
        patches: the patches, applied in order; a later patch sees the earlier ones' results.
        origin: where the files came from (a checkout's path and commit), quoted in errors.

    Returns:
        A new dict with the patched texts; ``texts`` is left as it was.

    Raises:
        PatchError: a patch's file is not in ``texts``, or its ``old`` text does not occur
            exactly once in that file.
    """
    out = dict(texts)
    for patch in patches:
        if patch.file not in out:
            raise PatchError(f"patch {patch.name!r}: no file {patch.file!r} (from {origin})")
        count = out[patch.file].count(patch.old)
        if count != 1:
            raise PatchError(
                f"patch {patch.name!r} matches {count} times in {patch.file} (from {origin}); "
                f"expected exactly once: {patch.old!r}"
            )
        out[patch.file] = out[patch.file].replace(patch.old, patch.new)
    return out


def swap_import(text: str, old: str, new: str) -> str:
    """``text`` with the one line whose stripped text is ``old`` replaced by ``new``.

    The line keeps its indentation (an import inside a function stays there).

    Args:
        text: the script.
        old: the import line to replace, without indentation.
        new: its replacement, without indentation.

    Returns:
        The script with that line swapped.

    Raises:
        PatchError: ``old`` is not on exactly one line.

    Example:
        >>> swap_import("    import a\\nx = 1\\n", "import a", "import b")
        '    import b\\nx = 1\\n'
    """
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1:
        raise PatchError(f"{old!r} is on {len(hits)} lines; expected exactly one")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")) :]
    lines[hits[0]] = indent + new + ending
    return "".join(lines)


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The pairs of lines that differ between two texts of the same line count.

    Args:
        before: one text.
        after: the other.

    Returns:
        ``(before_line, after_line)`` for each line that differs, in order.

    Raises:
        PatchError: the texts have different numbers of lines.

    Example:
        >>> changed_lines("a\\nb\\n", "a\\nc\\n")
        [('b', 'c')]
    """
    old, new = before.splitlines(), after.splitlines()
    if len(old) != len(new):
        raise PatchError(f"line counts differ: {len(old)} != {len(new)}")
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]
