"""The ``tdscheme`` command: ``main.py`` (the light entry), ``commands.py``, ``options.py``.

``python -m tdscheme.cli`` and the ``tdscheme`` console script run :func:`main`.
Importing this package imports only the light entry (no torch), so that
``tdscheme train`` can start Ray while the commands import.
"""

from __future__ import annotations

from tdscheme.cli.main import main

__all__ = ["main"]
