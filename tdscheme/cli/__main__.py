"""``python -m tdscheme.cli``: runs the ``tdscheme`` command."""

from __future__ import annotations

import sys

from tdscheme.cli.main import main

sys.exit(main())
