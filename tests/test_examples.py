"""Every example in examples/ runs as written, against the local servers command.

The servers command runs as a subprocess (on free ports, as a user would run it on the
default ones), and each example runs as its header says, with the variables that point
it at those ports. Each header gives the exact commands; without a server each example
stops at once with one line saying what to start.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers_command import FREE_PORTS, START_TIMEOUT, Running, start_servers

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


def _is_spark(path: Path) -> bool:
    return path.name.startswith("spark_")


# Spark examples start a local SparkSession (Java 17): marked (so `./run quick` skips
# them) and given more time.
EXAMPLE_PARAMS = [pytest.param(p, marks=pytest.mark.spark) if _is_spark(p) else p for p in EXAMPLES]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_servers(tmp_path_factory.mktemp("servers"), *FREE_PORTS)
    try:
        running.read_until(r"^Ready\.", START_TIMEOUT)
        yield running
    finally:
        code, _, stderr = running.stop()
        assert code == 0, stderr


def _example_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    root = str(Path(__file__).parent.parent)
    env.update(variables, PYTHONPATH=root)  # this checkout's aioclients
    return env


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 9


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_header_says_how_to_run_it(path: Path) -> None:
    header = ast.get_docstring(ast.parse(path.read_text()))
    assert header is not None
    assert "    .venv/bin/aioclients-servers\n" in header
    assert f"    .venv/bin/python examples/{path.name}\n" in header
    assert 'pip install "aioclients[servers' in header
    if _is_spark(path):
        assert "Java 17" in header


@pytest.mark.parametrize("path", EXAMPLE_PARAMS, ids=lambda p: p.name)
def test_example_runs(path: Path, servers: Running) -> None:
    env = _example_env(**servers.environment)
    if _is_spark(path):
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    result = subprocess.run(
        [sys.executable, f"examples/{path.name}"],  # as its header says
        cwd=path.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=280 if _is_spark(path) else 120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "an example should show what it did"
    assert "Traceback" not in result.stderr
    assert " 1 micro-batches" not in result.stdout
    if not _is_spark(path):  # Spark's JVM prints its own start-up lines
        # What the example itself logs is all there is: no library noise.
        noise = [line for line in result.stderr.splitlines() if "orders-service" not in line]
        assert noise == [], result.stderr


@pytest.fixture(scope="module")
def nothing_listens() -> Iterator[dict[str, str]]:
    """Every address an example reads, refusing connections (bound, not listening)."""
    sockets = [socket.socket() for _ in range(5)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        a, b, c, d, e = (f"127.0.0.1:{s.getsockname()[1]}" for s in sockets)
        yield {
            "NATS_URL": f"nats://{a}",
            "NSQD_TCP": b,
            "NSQD_HTTP": c,
            "NSQLOOKUPD_HTTP": d,
            "LIFTBRIDGE_BROKERS": f"{e},{e}",
        }
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_without_servers_an_example_says_what_to_start(
    path: Path, nothing_listens: dict[str, str]
) -> None:
    if _is_spark(path):
        pytest.importorskip("pyspark")  # it fails before any Spark starts
    result = subprocess.run(
        [sys.executable, f"examples/{path.name}"],
        cwd=path.parent.parent,
        env=_example_env(**nothing_listens),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # one line, no traceback
    assert "(connection refused)" in lines[0]
    assert "`aioclients-servers`" in lines[0]


def _run_demo(url: str, *extra: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return subprocess.run(
        [sys.executable, "-m", "aioclients.demo", "--orders", "2000", "--nats-url", url, *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _assert_liftbridge_and_nsq(stdout: str, shipped_by: str) -> None:
    """The payments went through Liftbridge and the shipment requests through NSQ, and
    every system reports the same number of paid orders."""
    published = re.search(
        r"Published (\d+) payments in .* over 2 partitions; read (\d+) back", stdout
    )
    assert published, stdout
    paid = int(published[1])
    assert 0 < paid < 2000, "the demo leaves some of its 2000 orders unpaid"
    assert int(published[2]) == paid
    assert shipped_by in stdout
    assert f"NSQ: the Reader received {paid} shipment requests" in stdout
    assert f"({paid} published to nsqd)" in stdout
    assert "Every paid order reached NSQ once" in stdout
    assert (
        f"All checks passed: 2000 orders in JetStream, {paid} payments in Liftbridge, "
        f"{paid} shipment requests through NSQ"
    ) in stdout


def _assert_throughput_summary(stdout: str, *, spark: bool) -> None:
    """The demo ends with what each system moved per second."""
    summary = stdout.split("Throughput in this run", 1)
    assert len(summary) == 2, stdout
    lines = summary[1].splitlines()
    for pattern in (
        r"JetStream\s+publish_async\s+[\d,]+/s\s+Direct Get \(batched\)\s+[\d,]+/s",
        r"Liftbridge\s+publish_async\s+[\d,]+/s\s+Subscribe\s+[\d,]+/s",
        r"NSQ\s+(MPUB|Spark sink)\s+[\d,]+/s\s+\(sent, then received by the Reader\)",
    ):
        assert any(re.search(pattern, line) for line in lines), (pattern, summary[1])
    assert any(re.search(r"Spark\s+jetstream read\s+[\d,]+/s", line) for line in lines) == spark


def test_demo_runs_end_to_end_without_spark(nats_server: object) -> None:
    result = _run_demo(nats_server.url, "--no-spark", timeout=120)  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Revenue per region" in result.stdout
    assert "100 retried publishes de-duplicated" in result.stdout
    _assert_liftbridge_and_nsq(result.stdout, "per paid order to NSQ topic shipments_")
    assert "Spark" not in result.stdout
    _assert_throughput_summary(result.stdout, spark=False)


@pytest.mark.spark
def test_demo_runs_end_to_end(nats_server: object, tmp_path: Path) -> None:
    spark_log = tmp_path / "spark.log"
    result = _run_demo(
        nats_server.url,  # type: ignore[attr-defined]
        "--spark-log",
        str(spark_log),
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Spark's start-up lines (the JVM's, log4j's) went to the log file, not the terminal.
    for noise in ("log4j", "Setting default log level", " WARN ", "incubator modules"):
        assert noise not in result.stdout + result.stderr, (noise, result.stderr)
    assert "log4j" in spark_log.read_text()
    assert f"its own log: {spark_log}" in result.stdout
    assert "Revenue per region" in result.stdout
    assert "100 retried publishes de-duplicated" in result.stdout
    assert "Spark read 2000 orders" in result.stdout
    assert "Spark's revenue per region matches the asyncio client's" in result.stdout
    assert "through the liftbridge data source" in result.stdout
    assert "Spark's join matches the payments published to Liftbridge" in result.stdout
    _assert_liftbridge_and_nsq(result.stdout, "(nsq sink)")
    _assert_throughput_summary(result.stdout, spark=True)
