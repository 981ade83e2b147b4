"""The instrumentor itself: what it wraps, that uninstrument() puts back the very
same functions, and that OpenTelemetry stays out of the library unless asked for."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
from otel_support import Otel

import aioclients.jetstream as js
import aioclients.liftbridge as lb
import aioclients.nsq as nsq
from aioclients.telemetry import AioClientsInstrumentor

ROOT = Path(__file__).resolve().parents[2]

# The public methods instrument() must wrap (a floor: it may wrap more).
EXPECTED = [
    (js.JetStream, "publish"),
    (js.JetStream, "publish_async"),
    (js.KeyValue, "put"),
    (js.Consumer, "next"),
    (js.MessageStream, "__anext__"),
    (js.FetchResult, "__anext__"),
    (js.OrderedMessageStream, "__anext__"),
    (js.Msg, "ack"),
    (js.Msg, "nak"),
    (js.Msg, "term"),
    (nsq.Producer, "publish"),
    (nsq.Producer, "mpublish"),
    (nsq.Producer, "dpublish"),
    (nsq.HTTPProducer, "mpublish"),
    (nsq.Reader, "__anext__"),
    (nsq.Reader, "run"),
    (nsq.Message, "finish"),
    (nsq.Message, "requeue"),
    (lb.Client, "publish"),
    (lb.Client, "publish_async"),
    (lb.Client, "publish_to_subject"),
    (lb.Subscription, "__anext__"),
    (lb.GroupConsumer, "__anext__"),
]


def test_uninstrument_puts_back_the_original_functions() -> None:
    instrumentor = AioClientsInstrumentor()
    assert not instrumentor.is_instrumented_by_opentelemetry
    before = {(cls, name): cls.__dict__[name] for cls, name in EXPECTED}
    instrumentor.instrument()
    try:
        wrapped = instrumentor.wrapped_methods()
        assert set(EXPECTED) <= set(wrapped)
        originals = {pair: pair[0].__dict__[pair[1]].__wrapped__ for pair in wrapped}
        for pair in EXPECTED:
            assert pair[0].__dict__[pair[1]] is not before[pair]
            assert originals[pair] is before[pair]
    finally:
        instrumentor.uninstrument()
    assert instrumentor.wrapped_methods() == []
    for (cls, name), original in originals.items():
        assert cls.__dict__[name] is original, f"{cls.__name__}.{name} is still wrapped"
        assert not hasattr(original, "__wrapped__")


def test_instrument_twice_then_uninstrument(otel: Otel) -> None:
    original = js.JetStream.__dict__["publish"].__wrapped__
    AioClientsInstrumentor().instrument()  # already instrumented: a warning, no second layer
    assert js.JetStream.__dict__["publish"].__wrapped__ is original
    assert AioClientsInstrumentor().instrumentation_dependencies() == ("aioclients",)


def test_the_entry_point_names_the_instrumentor() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry = pyproject["project"]["entry-points"]["opentelemetry_instrumentor"]["aioclients"]
    module, _, attr = entry.partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is AioClientsInstrumentor
    extras = pyproject["project"]["optional-dependencies"]
    assert any(d.startswith("opentelemetry-api") for d in extras["otel"])
    assert any(d.startswith("opentelemetry-instrumentation") for d in extras["otel"])
    assert any(d.startswith("opentelemetry-sdk") for d in extras["test"])


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_aioclients_telemetry_imports_opentelemetry() -> None:
    package = ROOT / "aioclients"
    offenders = [
        str(path.relative_to(ROOT))
        for path in package.rglob("*.py")
        if "telemetry" not in path.relative_to(package).parts and "opentelemetry" in _imports(path)
    ]
    assert offenders == []
    assert "opentelemetry" in _imports(package / "telemetry" / "_common.py")  # the check bites


# A meta-path finder that makes every ``opentelemetry`` module unimportable, as in
# an environment without the ``otel`` extra.
_BLOCK = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
"""

_WITHOUT_OTEL = """
import asyncio, importlib, sys

import aioclients
import aioclients.jetstream
import aioclients.liftbridge
import aioclients.nsq
import aioclients.spark
from aioclients.testing import NsqdEmulator


async def main(url):
    async with await aioclients.jetstream.connect(url) as js:
        await js.create_stream("NOOTEL", subjects=["nootel.>"])
        ack = await js.publish("nootel.x", b"x")
        consumer = await js.create_consumer("NOOTEL", durable_name="c")
        msg = await consumer.next(expires=5)
        await msg.ack()
        assert msg.data == b"x" and msg.headers is None, msg.headers
        await js.delete_stream("NOOTEL")
    async with NsqdEmulator() as nsqd:
        async with aioclients.nsq.Producer(nsqd.tcp_address) as producer:
            await producer.publish("t", b"y")
        async with aioclients.nsq.Reader("t", "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as r:
            async for m in r:
                await m.finish()
                break
    assert not any(n.startswith("opentelemetry") for n in sys.modules)
    try:
        importlib.import_module("aioclients.telemetry")
    except ImportError as exc:
        print("IMPORT-ERROR:", exc)
    else:
        raise AssertionError("aioclients.telemetry imported without opentelemetry")


asyncio.run(main(sys.argv[1]))
print("OK")
"""


def test_the_library_runs_without_opentelemetry(nats_server: object, tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="aioclients.spark needs the spark extra")
    script = tmp_path / "without_otel.py"
    script.write_text(_BLOCK + textwrap.dedent(_WITHOUT_OTEL))
    result = subprocess.run(
        [sys.executable, str(script), nats_server.url],  # type: ignore[attr-defined]
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout
    assert "'otel' extra" in result.stdout
    assert "pip install 'aioclients[otel]'" in result.stdout


def test_importing_the_clients_does_not_import_opentelemetry() -> None:
    # opentelemetry is installed here: nothing but aioclients.telemetry may load it
    code = (
        "import sys, aioclients, aioclients.jetstream, aioclients.nsq, aioclients.liftbridge\n"
        "print(sorted(n for n in sys.modules if n.startswith('opentelemetry')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
