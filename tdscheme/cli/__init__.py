"""The ``tdscheme`` command: ``main.py`` (the light entry), ``parser.py`` and
``options.py`` (the parser and the preset, no torch), ``commands.py`` (the commands).

``python -m tdscheme.cli`` and the ``tdscheme`` console script run :func:`main`.
Importing this package imports only the light entry (no torch), so that
``tdscheme train`` checks its settings before Ray starts and starts Ray while the
commands import.
"""

from __future__ import annotations

from tdscheme.cli.main import main

__all__ = ["main"]
