"""The local servers command run as a subprocess, as a user runs it: for tests."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FREE_PORTS = [
    "--nats-port=0",
    "--nsqd-tcp-port=0",
    "--nsqd-http-port=0",
    "--nsqlookupd-tcp-port=0",
    "--nsqlookupd-http-port=0",
    "--liftbridge-ports=0,0",
]
START_TIMEOUT = 60.0


@dataclass
class Running:
    """A servers command running in a subprocess, with what it printed so far."""

    proc: subprocess.Popen[str]
    tmpdir: Path
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def read_until(self, pattern: str, timeout: float) -> str:
        """The first stdout line (read from now on) matching ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {pattern!r} within {timeout}s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"exited before {pattern!r}: {self.lines}")
            self.lines.append(line)
            if re.search(pattern, line):
                return line

    @property
    def environment(self) -> dict[str, str]:
        """The variables the command told the examples to use."""
        (line,) = [x for x in self.lines if x.startswith("For the examples")]
        return dict(item.split("=", 1) for item in line.split("export ", 1)[1].split())

    def children(self) -> list[int]:
        """The pids of the command's child processes (Linux /proc)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def stop(
        self, sig: int = signal.SIGTERM, *, group: bool = False, timeout: float = 30.0
    ) -> tuple[int, str, str]:
        """Send ``sig`` (with ``group``, to the whole process group, as a terminal sends
        Ctrl-C) and wait for the exit: the status, stdout and stderr."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        stdout, stderr = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "\n".join([*self.lines, stdout]), stderr


def start_servers(tmp_path: Path, *args: str, pump: bool = True) -> Running:
    """Start ``python -m aioclients.testing serve *args`` with ``TMPDIR`` in ``tmp_path``.

    Until the line ``Ready.``, stdout is read as it comes (:meth:`Running.read_until`);
    without ``pump`` the caller reads everything with ``communicate()``.
    """
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "aioclients.testing", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # a process group of its own, as in a terminal
    )
    running = Running(proc, tmpdir)
    if not pump:  # the caller reads everything with communicate()
        return running
    assert proc.stdout is not None
    stdout = proc.stdout

    def pump() -> None:
        # Lines until "Ready." go through the queue; the rest is left for communicate().
        for line in stdout:
            running._queue.put(line.rstrip("\n"))
            if line.startswith("Ready."):
                return
        running._queue.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return running
