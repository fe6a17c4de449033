"""An env config and its ``apply_env_config`` as checkpoint data, and back.

A worker's state keeps the newest env config it received and the callable that applies
it, and a checkpoint holds only what ``torch.load(weights_only=True)`` reads: tensors,
numbers, strings, ``None`` and lists, tuples and dicts of them. :func:`encode_env_config`
turns a value into such data or refuses it with a ``TypeError`` naming its place, its
type and what is accepted. It runs on the driver when a config is pushed
(``set_env_config``) or a curriculum is built, so a value a checkpoint cannot hold is
refused there, never at a checkpoint in the middle of a run; a worker saves the form its
push carries. :func:`decode_env_config` rebuilds the value, equal to the one pushed and
of the same type:

* ``None``, bool, int, float, str and tensors stay as they are;
* lists, tuples and dicts (str or int keys) are converted item by item;
* numpy arrays and scalars (bool, int or float) are tagged with their dtype;
* dataclass and ``NamedTuple`` instances are stored as their class's import path
  (``"module:QualName"``) and their fields. They are rebuilt by importing the class and
  calling it with the fields ``__init__`` takes, then every field is set back as saved;
* module-level functions and classes are stored as their import path, after checking
  that the path imports back as the same object. A lambda, a closure, a local function,
  a bound method or a ``functools.partial`` has no such path and is refused. Use a
  module-level function, or a dataclass with a ``__call__`` method that holds the
  parameters.

A tagged value is a dict with the key ``"__tdscheme__"``, so a config dict may not use
that key. Decoding imports the modules the paths name, as unpickling does, but it only
rebuilds dataclasses, NamedTuples, functions and classes: it never unpickles anything.

Example:
    >>> import dataclasses
    >>> from tdscheme.envs.env_config import TaskDistribution
    >>> tasks = TaskDistribution([{"g": 2.0}, {"g": 10.0}], probs=[3, 1])
    >>> form = encode_env_config(tasks, name="config")
    >>> form["__tdscheme__"], form["path"]
    ('dataclass', 'tdscheme.envs.env_config:TaskDistribution')
    >>> decode_env_config(form) == tasks
    True
    >>> encode_env_config(lambda env, config: None, name="apply_env_config")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: apply_env_config=<function <lambda> at ...> of type function is invalid: ...
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import sys
from typing import Any

import numpy as np

__all__ = ["TAG", "decode_env_config", "encode_env_config"]

#: The key of a tagged value (a dataclass, a NamedTuple, a callable, a numpy value).
TAG = "__tdscheme__"

ACCEPTED = (
    "None, bool, int, float, str, tensors, numpy arrays and scalars (bool, int, float), "
    "lists, tuples and dicts (str or int keys) of them, dataclass or NamedTuple instances, "
    "and module-level functions or classes"
)
_PLAIN = (type(None), bool, int, float, str)
_NUMPY_KINDS = "biuf"  # bool, int, uint, float: what torch.from_numpy and .item() carry


def encode_env_config(value: Any, *, name: str) -> Any:
    """``value`` as data a checkpoint holds (see the module); checked to decode back.

    Args:
        value: an env config, or an ``apply_env_config`` callable (``None``: nothing).
        name: the argument's name, used in errors (``"config"``, ``"apply_env_config"``).

    Returns:
        Data made of tensors, numbers, strings, ``None``, lists, tuples and dicts.

    Raises:
        TypeError: ``value`` holds something a checkpoint cannot hold. The error names
            where (e.g. ``config['levels'][1].g``), its type and what is accepted.
    """
    form = _encode(value, name)
    try:  # a class that cannot be rebuilt from its fields (an InitVar, ...) fails here too
        decode_env_config(form)
    except Exception as err:
        raise TypeError(
            f"{name}={_short(value)} is invalid: it cannot be rebuilt from its fields "
            f"({type(err).__name__}: {err}); accepted: {ACCEPTED}"
        ) from err
    return form


def decode_env_config(form: Any) -> Any:
    """The value :func:`encode_env_config` stored (other values are returned as they are).

    Raises:
        ImportError: a class or function named in ``form`` cannot be imported.
        TypeError: a tagged value names something that is not a dataclass,
            NamedTuple or callable.
    """
    if type(form) in (list, tuple):
        return type(form)(decode_env_config(item) for item in form)
    if type(form) not in (dict, collections.OrderedDict):  # plain data, or decoded already
        return form
    if TAG not in form:
        return type(form)((key, decode_env_config(value)) for key, value in form.items())
    kind = form[TAG]
    if kind == "numpy":
        return np.dtype(form["dtype"]).type(form["value"])
    if kind == "ndarray":
        return form["data"].numpy().astype(form["dtype"], copy=True)
    found = _import(form["path"])
    if kind == "callable" and callable(found):
        return found
    fields = {k: decode_env_config(v) for k, v in form.get("fields", {}).items()}
    if kind == "namedtuple" and isinstance(found, type) and issubclass(found, tuple):
        return found(**fields)
    if kind == "dataclass" and isinstance(found, type) and dataclasses.is_dataclass(found):
        return _rebuild(found, fields)
    raise TypeError(f"a checkpoint's {kind!r} names {form['path']!r}, which is not one")


def _is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch (no tensor exists before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _encode(value: Any, path: str) -> Any:
    kind = type(value)
    if kind in _PLAIN or _is_tensor(value):
        return value
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in _NUMPY_KINDS:
        if isinstance(value, np.generic):
            return {TAG: "numpy", "dtype": value.dtype.str, "value": value.item()}
        import torch  # here: a curriculum is checked before Ray starts, where torch is not loaded

        try:
            data = torch.from_numpy(np.ascontiguousarray(value))
        except TypeError as err:  # a dtype torch has no tensor of
            raise TypeError(
                f"{path}={_short(value)} is invalid: {err}; accepted: {ACCEPTED}"
            ) from err
        return {TAG: "ndarray", "dtype": value.dtype.str, "data": data}
    if kind in (list, tuple):
        return kind(_encode(item, f"{path}[{i}]") for i, item in enumerate(value))
    if kind in (dict, collections.OrderedDict):
        return _encode_dict(value, path)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _tagged("dataclass", value, path, fields)
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return _tagged("namedtuple", value, path, value._asdict())
    if callable(value):
        import_path = _import_path(value)
        if import_path is None:
            raise TypeError(
                f"{path}={_short(value)} of type {kind.__name__} is invalid: a checkpoint "
                "stores a callable by its import path, which a lambda, a closure, a local "
                "function, a bound method or a partial does not have; accepted: a "
                "module-level function or class (e.g. `def apply(env, config)` at the top "
                "of a module), or a dataclass instance with a __call__ method"
            )
        return {TAG: "callable", "path": import_path}
    raise TypeError(
        f"{path}={_short(value)} of type {kind.__module__}.{kind.__qualname__} is invalid: a "
        f"checkpoint cannot hold it; accepted: {ACCEPTED}"
    )


def _encode_dict(value: dict, path: str) -> dict:
    out = type(value)()
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, (str, int)) or key == TAG:
            raise TypeError(
                f"{path} has the key {key!r} of type {type(key).__name__}, which is invalid; "
                f"accepted: str or int keys other than {TAG!r}"
            )
        out[key] = _encode(item, f"{path}[{key!r}]")
    return out


def _tagged(kind: str, value: Any, path: str, fields: dict[str, Any]) -> dict[str, Any]:
    cls = type(value)
    import_path = _import_path(cls)
    if import_path is None:
        raise TypeError(
            f"{path} of type {cls.__qualname__} is invalid: a checkpoint names its class by "
            f"import path, and {cls.__module__}:{cls.__qualname__} does not import back as "
            "it (a class defined in a function?); accepted: a class defined at the top of a "
            "module"
        )
    encoded = {key: _encode(item, f"{path}.{key}") for key, item in fields.items()}
    return {TAG: kind, "path": import_path, "fields": encoded}


def _rebuild(cls: type, fields: dict[str, Any]) -> Any:
    """``cls`` called with its ``__init__`` fields, then every field set back as saved."""
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    value = cls(**{k: v for k, v in fields.items() if k in init})
    for key, item in fields.items():  # what __post_init__ derived comes back exactly as saved
        object.__setattr__(value, key, item)
    return value


def _import_path(obj: Any) -> str | None:
    """``"module:QualName"`` when that imports back as ``obj`` itself, else ``None``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    path = f"{module}:{qualname}"
    try:
        return path if _import(path) is obj else None
    except ImportError:
        return None


def _import(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found = importlib.import_module(module)
    for part in qualname.split("."):
        if not hasattr(found, part):
            raise ImportError(f"cannot import {path}: {found!r} has no attribute {part!r}")
        found = getattr(found, part)
    return found


def _short(value: Any) -> str:
    """``repr(value)``, its middle cut past 80 characters (the end names a lambda, a local)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:38]}...{text[-39:]}"
