"""examples/fastapi_traced.py runs as written (its script mode keeps the spans in an
``InMemorySpanExporter`` and prints each trace as a tree): one trace per request,
from the server span through the publish to the background consumer's processing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_traced.py"


def test_each_request_is_one_trace_through_the_consumer(
    nats_server: object, unique_name: str
) -> None:
    env = {
        **os.environ,
        "NATS_URL": nats_server.url,  # type: ignore[attr-defined]
        "ORDERS_STREAM": unique_name,
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    trees = [
        [line.split(" [")[0] for line in block.splitlines()[1:]]
        for block in re.split(r"^(?=trace )", result.stdout, flags=re.M)
        if block.strip()
    ]
    request_trees = [t for t in trees if t and t[0].strip() == "POST /orders"]
    assert len(request_trees) == 3, result.stdout
    for tree in request_trees:
        assert tree == [
            "  POST /orders",
            f"    send {unique_name}.new",
            "      process orders",
            f"        ack {unique_name}",
        ]
    # the consumer's receive spans stand alone and link to the publishes
    sends = {line.split()[-1] for line in lines if " send " in line and "[PRODUCER]" in line}
    links = {line.split()[-1] for line in lines if f"receive {unique_name} [CLIENT]" in line}
    assert len(sends) == 3
    assert links == sends
