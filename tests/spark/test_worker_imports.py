"""What a Python worker loads to run one format's reader or writer.

Spark's Python workers unpickle a data source class by reference, so each fresh
worker imports ``aioclients.spark`` and the module of that format. A jetstream
read must not pay for the other clients' modules and their libraries (grpc for
liftbridge, the nsq client): about half a second per fresh worker.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

OTHER_CLIENTS = ("grpc", "aioclients.liftbridge", "aioclients.nsq")


def loaded_after(module: str) -> list[str]:
    """The modules of ``OTHER_CLIENTS`` a fresh interpreter holds after importing ``module``."""
    names = " ".join(OTHER_CLIENTS)
    code = f"import sys, {module}\nprint(*(m for m in {names!r}.split() if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    return done.stdout.split()


@pytest.mark.parametrize(
    "module", ["aioclients.spark", "aioclients.spark._jetstream", "aioclients.spark._write_io"]
)
def test_a_jetstream_worker_loads_no_other_client(module: str) -> None:
    assert loaded_after(module) == []


def test_the_nsq_and_liftbridge_formats_still_load_their_clients() -> None:
    # The check above can fail: these modules do load them.
    assert loaded_after("aioclients.spark._nsq") == ["aioclients.nsq"]
    assert loaded_after("aioclients.spark._liftbridge") == ["grpc", "aioclients.liftbridge"]
