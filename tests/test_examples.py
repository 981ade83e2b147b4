"""Every example in examples/ runs as written, against the test server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


def _is_spark(path: Path) -> bool:
    return path.name.startswith("spark_")


# Spark examples start a local SparkSession: marked (so `./run quick` skips them) and
# given more time.
EXAMPLE_PARAMS = [pytest.param(p, marks=pytest.mark.spark) if _is_spark(p) else p for p in EXAMPLES]


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLE_PARAMS, ids=lambda p: p.name)
def test_example_runs(path: Path, nats_server: object) -> None:
    env = dict(os.environ, NATS_URL=nats_server.url)  # type: ignore[attr-defined]
    if _is_spark(path):
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    result = subprocess.run(
        [sys.executable, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280 if _is_spark(path) else 120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "an example should show what it did"
    assert "Traceback" not in result.stderr


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
