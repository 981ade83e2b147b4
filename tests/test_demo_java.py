"""The demo checks for Java 17 before it starts Spark, and says in one line what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aioclients import demo

pytest.importorskip("pyspark")  # without pyspark the demo skips Spark, Java or not

ROOT = Path(__file__).resolve().parent.parent


def _fake_java(folder: Path, version_line: str) -> Path:
    """A JAVA_HOME whose bin/java answers ``-version`` like a real one (on stderr)."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return folder


def _run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioclients.demo", *args],
        env=dict(env, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("version_line", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', None),
        ('openjdk version "21.0.2" 2024-01-16', None),
        ('openjdk version "11.0.22" 2024-01-16', 11),
        ('java version "1.8.0_392"', 8),
    ],
)
def test_java_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version_line: str, major: int | None
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, version_line)))
    problem = demo.java_problem()
    if major is None:
        assert problem is None
    else:
        assert problem == f"{tmp_path}/bin/java is Java {major}"


def test_no_java_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert demo.java_problem() == "no `java` on PATH (and JAVA_HOME is not set)"


@pytest.mark.parametrize("where", ["PATH", "JAVA_HOME"])
def test_without_java_the_demo_says_what_to_do_in_one_line(tmp_path: Path, where: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    if where == "PATH":
        env["PATH"] = str(tmp_path)  # no java there
    else:
        env["JAVA_HOME"] = str(tmp_path / "nowhere")
    start = time.monotonic()
    result = _run_demo(env, "--orders", "10")
    assert result.returncode == 1
    assert result.stdout == ""  # checked before anything started
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    message = lines[0]
    assert message.startswith("The demo's Spark part needs Java 17 or newer: ")
    assert "`apt-get install openjdk-17-jre-headless`" in message
    assert "--no-spark" in message
    assert time.monotonic() - start < 60  # not the JVM's gateway timeout


def test_an_old_java_is_named(tmp_path: Path) -> None:
    env = dict(os.environ, JAVA_HOME=str(_fake_java(tmp_path, 'openjdk version "11.0.2"')))
    result = _run_demo(env, "--orders", "10")
    assert result.returncode == 1
    assert f"{tmp_path}/bin/java is Java 11." in result.stderr


def test_no_spark_needs_no_java(tmp_path: Path) -> None:
    """With --no-spark the demo runs without Java."""
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "nowhere"))
    result = _run_demo(env, "--orders", "10", "--no-spark")
    assert result.returncode == 0, result.stderr
    assert "Java" not in result.stdout + result.stderr
