"""The sitecustomize of ``benchmarks/torchrl_suite.py``'s pytest runs (its plugin puts this
directory on ``PYTHONPATH``).

torchrl sets multiprocessing's ``spawn`` start method, so a test that runs its collector in an
``mp.Process`` child imports the test module afresh there. Such a child (started with
``--multiprocessing-fork`` by the pytest process itself) installs the class under test before it
unpickles its target; every other process (Ray's among them) only reads two variables here.
"""

from __future__ import annotations

import os
import sys

_SPAWNED_BY_PYTEST = "--multiprocessing-fork" in sys.argv and os.environ.get(
    "TORCHRL_SUITE_PYTEST_PID"
) == str(os.getppid())

if _SPAWNED_BY_PYTEST:
    import torchrl_suite_plugin

    torchrl_suite_plugin.install(os.environ["TORCHRL_SUITE_COLLECTOR"])
