"""Every format on a real standalone Spark cluster: Spark's own master and two workers,
started from the pyspark installation (``bin/spark-class
org.apache.spark.deploy.master.Master`` and ``...worker.Worker``, bound to 127.0.0.1,
one core and 1 GiB each), and an application on ``spark://127.0.0.1:<port>``.

This is how Spark runs beyond one machine: executors are launched by the workers, in
JVMs and Python workers of their own, from what the application ships (here the
checkout on ``PYTHONPATH``). The module runs batch reads, streaming reads restarted
from their checkpoints and writes of every format against it, then
stops the application, the workers and the master, also when a test fails. It takes
about a minute and a half.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _everywhere import (
    check_jetstream,
    check_jetstream_restart,
    check_liftbridge,
    check_liftbridge_restart,
    check_nsq,
    check_writes,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Standalone:
    """The master and workers this module started (each in a process group of its own)."""

    spark_home: Path
    work: Path
    master_port: int = field(default_factory=_free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _start(self, name: str, *args: str) -> None:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",  # the master's and workers' own JVMs
            SPARK_NO_DAEMONIZE="1",
        )
        log = (self.work / f"{name}.log").open("wb")
        try:
            process = subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stopped with everything in it
            )
        finally:
            log.close()
        self.processes.append(process)

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            for process in self.processes:
                if process.poll() is not None:
                    logs = "\n".join(
                        self.log(n)[-3000:] for n in ("master", "worker-1", "worker-2")
                    )
                    raise RuntimeError(f"a Spark daemon exited while waiting for {what}:\n{logs}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {START_TIMEOUT}s waiting for {what}")
            time.sleep(0.2)

    def start(self) -> None:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.master_port),
            "--webui-port", str(_free_port()),
        )  # fmt: skip
        self._wait("the master to listen", lambda: _accepts(self.master_port))
        for i in (1, 2):
            work = self.work / f"worker-{i}"
            work.mkdir()
            self._start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--webui-port", str(_free_port()),
                "--cores", "1",
                "--memory", "1g",
                "--work-dir", str(work),
                self.url,
            )  # fmt: skip
        self._wait(
            "two workers to register",
            lambda: self.log("master").count("Registering worker") >= 2,
        )

    def stop(self) -> None:
        """SIGTERM to each process group (the workers stop their executors), then SIGKILL
        to what is left after 30 seconds."""
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # executors left behind, if any
            except ProcessLookupError:
                pass
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def standalone_spark(classic_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import pyspark
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    classic_spark.stop()  # one SparkContext per process
    cluster = Standalone(Path(pyspark.__file__).parent, tmp_path_factory.mktemp("standalone"))
    session = None
    try:
        cluster.start()
        session = (
            SparkSession.builder.master(cluster.url)
            .appName("aioclients-tests-standalone")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.memory", "1g")
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            # The executors' Python workers import this checkout's aioclients.
            .config("spark.executorEnv.PYTHONPATH", str(REPO))
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        register_data_sources(session)
        status = session.sparkContext._jsc.sc().getExecutorMemoryStatus
        cluster._wait("two executors", lambda: status().size() >= 3)  # and the driver
        yield session
    finally:
        try:
            if session is not None:
                session.stop()
        finally:
            cluster.stop()
            shutil.rmtree(cluster.work, ignore_errors=True)


def test_the_application_runs_on_both_workers(standalone_spark: Any) -> None:
    assert standalone_spark.sparkContext.master.startswith("spark://127.0.0.1:")
    pids = (
        standalone_spark.sparkContext.parallelize(range(8), 8)
        .map(lambda _: __import__("os").getpid())
        .distinct()
        .collect()
    )
    assert len(pids) >= 2, "tasks ran in the executors of both workers"
    assert os.getpid() not in pids


async def test_jetstream(
    standalone_spark: Any, nats_server: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_jetstream(standalone_spark, nats_server.url, unique_name, tmp_path)


async def test_jetstream_restart_from_checkpoint(
    standalone_spark: Any, nats_server: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_jetstream_restart(standalone_spark, nats_server.url, unique_name, tmp_path)


async def test_liftbridge(
    standalone_spark: Any, liftbridge_cluster: Any, unique_name: str, tmp_path: Path
) -> None:
    addresses = list(liftbridge_cluster.addresses)
    await check_liftbridge(standalone_spark, addresses, unique_name, tmp_path)
    await check_liftbridge_restart(standalone_spark, addresses, f"{unique_name}-r", tmp_path)


async def test_nsq(
    standalone_spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_nsq(standalone_spark, await nsqd_factory(), unique_name[-60:], tmp_path)


async def test_writes(
    standalone_spark: Any,
    nats_server: Any,
    liftbridge_cluster: Any,
    nsqd_factory: Any,
    unique_name: str,
) -> None:
    await check_writes(
        standalone_spark,
        nats_server.url,
        list(liftbridge_cluster.addresses),
        await nsqd_factory(),
        unique_name,
    )
