"""CI's main run (``-n 2 --dist loadscope``) keeps every test under tests/spark/ on one
pytest-xdist worker (tests/spark_worker.py), and shares the others out test by test."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.spark_worker import SPARK_SCOPE, spark_scope

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """
from tests.spark_worker import pytest_xdist_make_scheduler
"""

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

MODULE = """
import pytest


@pytest.mark.parametrize("n", range(4))
def test_one(n):
    pass
"""


def test_the_spark_folder_is_one_unit_and_every_other_test_its_own() -> None:
    assert spark_scope("tests/spark/test_a.py::test_x[1]") == SPARK_SCOPE
    assert spark_scope("tests/spark/test_b.py::TestC::test_y") == SPARK_SCOPE
    assert spark_scope("tests/test_docs.py::test_z[docs/spark.md:24]") == (
        "tests/test_docs.py::test_z[docs/spark.md:24]"
    )
    assert spark_scope("tests/sparkly/test_a.py::test_x") == "tests/sparkly/test_a.py::test_x"


def _workers(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Which worker ran which test module, under -n 2 --dist loadscope."""
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    for name in ("spark/test_s1", "spark/test_s2", "spark/test_s3", "test_other"):
        path = pytester.path / "tests" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE)
    # The workers import tests.spark_worker from this checkout.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest("-n", "2", "--dist", "loadscope", "-v", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    ran: dict[str, set[str]] = {}
    for line in result.outlines:
        match = re.match(r"\[(gw\d)\] .*PASSED (\S+)::", line)
        if match:
            ran.setdefault(match[2], set()).add(match[1])
    assert sum(1 for line in result.outlines if " PASSED " in line) == 16, result.stdout.str()
    return ran


def test_the_spark_tests_run_on_one_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _workers(pytester, monkeypatch)
    spark = set().union(*(ran[f"tests/spark/test_s{i}.py"] for i in (1, 2, 3)))
    assert len(spark) == 1, ran
