"""CI's main run on two pytest-xdist workers (``-n 2 --dist loadscope``): every test
under ``tests/spark/`` on one worker, everything else beside them, test by test.

The Spark tests share one SparkSession per process (``tests/spark/conftest.py``) and
the cluster modules start JVMs of their own: split across workers, each worker would
start them again. The other tests (the Spark documentation blocks, examples and demo
included: they run Spark in subprocesses of their own) go to whichever worker is free,
so that the worker with the Spark tests takes its share of them once it is done.

pytest-xdist's ``--dist loadgroup`` (``xdist_group`` marks) would say the same, but it
tags a test by rewriting its node id, which pytest 9.2 no longer reads; the scheduler
below groups by path instead. Loaded by ``tests/conftest.py``; without xdist, or with
another ``--dist``, nothing changes.
"""

from __future__ import annotations

from typing import Any

import pytest

SPARK_FOLDER = "tests/spark/"
SPARK_SCOPE = "tests/spark (one worker)"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SparkOnOneWorker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return spark_scope(nodeid)

    return SparkOnOneWorker(config, log)


def spark_scope(nodeid: str) -> str:
    """The work unit of a test: all of tests/spark/ is one, any other test one of its own.

    (xdist queues the units largest first, so the Spark one starts at once.)"""
    return SPARK_SCOPE if nodeid.startswith(SPARK_FOLDER) else nodeid
