"""Instructions a Python command executes, counted by valgrind (the whole process).

Instruction counts do not move with the machine's load, so the ``*_instructions.py``
scripts compare checkouts by them: the difference of two runs of different sizes is
the cost of the work in between, start-up and connecting left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence

_VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def count_instructions(script: str, args: Sequence[str], pythonpath: Sequence[str]) -> int:
    """Instructions of ``python script *args`` with ``pythonpath`` first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    done = subprocess.run(
        [*_VALGRIND, sys.executable, script, *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{done.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))
