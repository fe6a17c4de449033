"""Command-line options generated from the fields of a preset's config dataclasses.

Each field ``frames_per_batch`` becomes ``--frames-per-batch``, parsed after the
field's annotation: ints and floats, ``none`` for an optional value left unset,
``--x/--no-x`` for booleans, ``64,64`` for a tuple of ints and JSON for dicts; a
field whose metadata lists ``choices`` accepts only those.
Options default to "not given", so only what the user typed overrides the preset.
The help of each option is the field's entry in its config's docstring (or a base's).

Example:
    >>> import argparse
    >>> from tdscheme.presets import get_preset
    >>> parser = argparse.ArgumentParser(prog="train")
    >>> add_setting_options(parser, get_preset("ppo-cartpole"))
    >>> vars(parser.parse_args(["--lr", "1e-3", "--no-sync", "--hidden-sizes", "32,32"]))
    {'lr': 0.001, 'sync': False, 'hidden_sizes': (32, 32)}
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["add_setting_options", "option_name", "setting_error"]

_SECTION_TITLES = {
    "algo": "algorithm settings",
    "scheme": "scheme settings (collectors, weights, Ray)",
    "trainer": "trainer settings (frames, evaluation, logs, checkpoints)",
}


def option_name(field: str) -> str:
    """``frames_per_batch`` -> ``--frames-per-batch``."""
    return "--" + field.replace("_", "-")


def add_setting_options(
    parser: argparse.ArgumentParser, preset: Any, *, skip: tuple[str, ...] = ()
) -> None:
    """Adds one option per setting of ``preset`` (its ``algo``, ``scheme`` and ``trainer``).

    Args:
        parser: the parser of ``tdscheme train``.
        preset: a :class:`~tdscheme.presets.Preset` whose configs define the settings,
            or a list of presets (one option per setting name, from the first preset
            that has it: presets with other algorithm configs add their settings).
        skip: settings that get no option (the command handles them itself).
    """
    presets = list(preset) if isinstance(preset, (list, tuple)) else [preset]
    seen = set(skip)
    for section, title in _SECTION_TITLES.items():
        group = parser.add_argument_group(title)
        for one in presets:
            _add_section_options(group, getattr(one, section), seen)


def _add_section_options(group: Any, config: Any, seen: set[str]) -> None:
    """Adds an option for each field of ``config`` not in ``seen`` (and marks it seen)."""
    docs = _field_docs(type(config))
    for field in dataclasses.fields(config):
        if field.name in seen:
            continue
        seen.add(field.name)
        annotation = str(field.type).replace(" ", "")
        help_text = docs.get(field.name, "")
        kwargs: dict[str, Any] = {"dest": field.name, "default": argparse.SUPPRESS}
        if annotation == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            parse, metavar = _value_parser(annotation)
            kwargs.update(type=parse, metavar=metavar)
            if field.metadata.get("choices"):  # e.g. --grad-communication {a,b}
                kwargs.update(choices=tuple(field.metadata["choices"]), metavar=None)
        group.add_argument(option_name(field.name), help=help_text, **kwargs)


def _value_parser(annotation: str) -> tuple[Callable[[str], Any], str]:
    optional = annotation.endswith("|None")
    base = annotation[: -len("|None")] if optional else annotation
    parsers: dict[str, tuple[Callable[[str], Any], str]] = {
        "int": (int, "INT"),
        "float": (float, "FLOAT"),
        "str": (str, "STR"),
        "bool": (_parse_bool, "BOOL"),
        "tuple[int,...]": (_parse_ints, "INT,INT,..."),
    }
    parse, metavar = parsers.get(base, (_parse_json, "JSON"))
    if not optional:
        return parse, metavar

    def parse_optional(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else parse(text)

    parse_optional.__name__ = getattr(parse, "__name__", "value")
    return parse_optional, f"{metavar}|none"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false) or none")


def _parse_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not comma-separated ints, e.g. 64,64"
        ) from None


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not JSON ({err.msg}), e.g. '{{\"num_cpus\": 1}}'"
        ) from None


def _field_docs(cls: type) -> dict[str, str]:
    """The ``Args:`` entries of a dataclass's docstrings, one line each.

    A subclass documents its own fields (and those it words for itself); its bases'
    docstrings document the fields it inherits.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # the subclass's entry wins
        docs.update(_args_entries(klass.__doc__ or ""))
    return {name: text.replace("%", "%%") for name, text in docs.items()}


def _args_entries(docstring: str) -> dict[str, str]:
    """The ``Args:`` entries of one docstring, one line each."""
    doc = inspect.cleandoc(docstring)
    match = re.search(r"^Args:\n(.*?)(?:\n\S|\Z)", doc, flags=re.S | re.M)
    if not match:
        return {}
    docs: dict[str, str] = {}
    current = None
    for line in match.group(1).splitlines():
        entry = re.match(r"^    (\w+): (.*)$", line)
        if entry:
            current = entry.group(1)
            docs[current] = entry.group(2)
        elif current and line.strip():
            docs[current] += " " + line.strip()
    return docs


def setting_error(err: BaseException, overrides: Mapping[str, Any]) -> str:
    """A usage-error message for a rejected setting, naming its option when it can.

    Args:
        err: the error a config raised, e.g. ``ValueError("num_collectors=0 is invalid; ...")``.
        overrides: the settings given on the command line.

    Returns:
        ``"argument --num-collectors: num_collectors=0 is invalid; ..."`` when the
        message names a given setting, else the message itself.

    Example:
        >>> setting_error(ValueError("lr=-1 is invalid; accepted: a number > 0"), {"lr": -1})
        'argument --lr: lr=-1 is invalid; accepted: a number > 0'
    """
    message = str(err)
    for name in sorted(overrides, key=len, reverse=True):
        if re.search(rf"\b{re.escape(name)}\b", message):
            return f"argument {option_name(name)}: {message}"
    return message
