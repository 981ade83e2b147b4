"""The signatures in the public API contract (the project's API.md), checked one by one.

Each case is a line of the contract: where the name lives, its parameters as the contract
writes them, and how it is called ("async": a coroutine function; "sync": a plain call,
whatever it returns; "class": a constructor). A documented parameter must exist with the
documented default and kind (keyword-only where the contract puts it after ``*``, at the
same position where it is positional); a parameter the contract does not name must have a
default, so a call written from the contract never misses an argument. The attributes
the contract names on handles and results, the error hierarchy and the enum members are
checked too.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

P = inspect.Parameter

# (module, dotted name, the contract's parameter list, kind)
SIGNATURES: list[tuple[str, str, str, str]] = [
    # JetStream
    (
        "aioclients.jetstream",
        "connect",
        'servers: str | list[str] = "nats://127.0.0.1:4222", *, domain=None,'
        ' api_prefix="$JS.API", timeout=5.0, **nats_options',
        "async",
    ),
    (
        "aioclients.jetstream",
        "JetStream",
        'nc, *, domain=None, api_prefix="$JS.API", timeout=5.0',
        "class",
    ),
    (
        "aioclients.jetstream",
        "JetStream.create_stream",
        "name, *, subjects=None, **config",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.update_stream", "name, **config", "async"),
    ("aioclients.jetstream", "JetStream.create_or_update_stream", "name, **config", "async"),
    ("aioclients.jetstream", "JetStream.stream", "name", "async"),
    ("aioclients.jetstream", "JetStream.delete_stream", "name", "async"),
    ("aioclients.jetstream", "JetStream.list_streams", "subject=None", "aiter"),
    ("aioclients.jetstream", "JetStream.stream_names", "subject=None", "aiter"),
    ("aioclients.jetstream", "JetStream.stream_name_by_subject", "subject", "async"),
    ("aioclients.jetstream", "JetStream.create_consumer", "stream, **config", "async"),
    ("aioclients.jetstream", "JetStream.update_consumer", "stream, **config", "async"),
    ("aioclients.jetstream", "JetStream.create_or_update_consumer", "stream, **config", "async"),
    ("aioclients.jetstream", "JetStream.consumer", "stream, name", "async"),
    ("aioclients.jetstream", "JetStream.delete_consumer", "stream, name", "async"),
    ("aioclients.jetstream", "JetStream.account_info", "", "async"),
    (
        "aioclients.jetstream",
        "JetStream.publish",
        'subject, payload=b"", *, headers=None, msg_id=None, expected_stream=None,'
        " expected_last_seq=None, expected_last_subject_seq=None,"
        " expected_last_msg_id=None, timeout=None, ttl=None",
        "async",
    ),
    (
        "aioclients.jetstream",
        "JetStream.publish_async",
        'subject, payload=b"", *, headers=None, msg_id=None, expected_stream=None,'
        " expected_last_seq=None, expected_last_subject_seq=None,"
        " expected_last_msg_id=None, timeout=None, ttl=None",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.publish_async_complete", "timeout=None", "async"),
    (
        "aioclients.jetstream",
        "JetStream.create_key_value",
        'bucket, *, history=1, ttl=None, max_value_size=None, max_bytes=None, storage="file",'
        " replicas=1, description=None, limit_marker_ttl=None",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.key_value", "bucket", "async"),
    ("aioclients.jetstream", "JetStream.delete_key_value", "bucket", "async"),
    (
        "aioclients.jetstream",
        "JetStream.ordered_consumer",
        'stream, *, filter_subjects=None, deliver_policy="all", opt_start_seq=None,'
        " opt_start_time=None, headers_only=False",
        "async",
    ),
    (
        "aioclients.jetstream",
        "JetStream.create_object_store",
        'bucket, *, description=None, ttl=None, max_bytes=None, storage="file", replicas=1,'
        " compression=False, metadata=None",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.object_store", "bucket", "async"),
    ("aioclients.jetstream", "JetStream.delete_object_store", "bucket", "async"),
    ("aioclients.jetstream", "JetStream.object_store_names", "", "aiter"),
    ("aioclients.jetstream", "JetStream.counter_add", "subject, delta=1, *, timeout=None", "async"),
    ("aioclients.jetstream", "JetStream.publish_batch", "messages, *, timeout=None", "async"),
    (
        "aioclients.jetstream",
        "JetStream.publish_schedule",
        'subject, payload=b"", *, target, at=None, every=None, cron=None, time_zone=None,'
        " ttl=None, headers=None",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.pause_consumer", "stream, name, until", "async"),
    ("aioclients.jetstream", "JetStream.resume_consumer", "stream, name", "async"),
    ("aioclients.jetstream", "JetStream.reset_consumer", "stream, name, *, seq=None", "async"),
    (
        "aioclients.jetstream",
        "JetStream.create_push_consumer",
        "stream, *, deliver_subject=None, **config",
        "async",
    ),
    (
        "aioclients.jetstream",
        "JetStream.create_or_update_push_consumer",
        "stream, *, deliver_subject=None, **config",
        "async",
    ),
    ("aioclients.jetstream", "JetStream.push_consumer", "stream, name", "async"),
    ("aioclients.jetstream", "JetStream.close", "", "async"),
    # Stream
    ("aioclients.jetstream", "Stream.info", "", "async"),
    ("aioclients.jetstream", "Stream.purge", "*, subject=None, seq=None, keep=None", "async"),
    (
        "aioclients.jetstream",
        "Stream.get_msg",
        "seq=None, *, last_by_subj=None, next_by_subj=None",
        "async",
    ),
    ("aioclients.jetstream", "Stream.delete_msg", "seq, *, erase=False", "async"),
    (
        "aioclients.jetstream",
        "Stream.direct_get",
        "seq=None, *, last_by_subj=None, next_by_subj=None, start_time=None",
        "async",
    ),
    (
        "aioclients.jetstream",
        "Stream.direct_get_batch",
        "*, batch, seq=None, start_time=None, next_by_subj=None, max_bytes=None",
        "aiter",
    ),
    (
        "aioclients.jetstream",
        "Stream.direct_get_last_for",
        "subjects, *, up_to_seq=None, up_to_time=None, batch=None",
        "aiter",
    ),
    ("aioclients.jetstream", "Stream.create_consumer", "**config", "async"),
    ("aioclients.jetstream", "Stream.create_or_update_consumer", "**config", "async"),
    ("aioclients.jetstream", "Stream.consumer", "name", "async"),
    ("aioclients.jetstream", "Stream.delete_consumer", "name", "async"),
    ("aioclients.jetstream", "Stream.unpin_consumer", "consumer, group", "async"),
    (
        "aioclients.jetstream",
        "Stream.ordered_consumer",
        '*, filter_subjects=None, deliver_policy="all", opt_start_seq=None,'
        " opt_start_time=None, headers_only=False",
        "async",
    ),
    ("aioclients.jetstream", "Stream.counter_value", "subject", "async"),
    ("aioclients.jetstream", "Stream.counter_values", "subjects", "aiter"),
    # Consumer
    ("aioclients.jetstream", "Consumer.info", "", "async"),
    ("aioclients.jetstream", "Consumer.delete", "", "async"),
    ("aioclients.jetstream", "Consumer.unpin", "group", "async"),
    ("aioclients.jetstream", "Consumer.pause", "until", "async"),
    ("aioclients.jetstream", "Consumer.resume", "", "async"),
    (
        "aioclients.jetstream",
        "Consumer.next",
        "*, expires=30.0, idle_heartbeat=None, group=None, min_pending=None,"
        " min_ack_pending=None, priority=None",
        "async",
    ),
    (
        "aioclients.jetstream",
        "Consumer.fetch",
        "max_messages=None, *, max_bytes=None, expires=30.0, idle_heartbeat=None, group=None,"
        " min_pending=None, min_ack_pending=None, priority=None",
        "sync",
    ),
    (
        "aioclients.jetstream",
        "Consumer.consume",
        "*, max_messages=None, max_bytes=None, expires=30.0, idle_heartbeat=None,"
        " threshold_messages=None, threshold_bytes=None, group=None, min_pending=None,"
        " min_ack_pending=None, priority=None, on_event=None",
        "sync",
    ),
    ("aioclients.jetstream", "PushConsumer.consume", "*, on_event=None", "sync"),
    # OrderedConsumer: next, fetch and consume as on Consumer (no acks, no priority groups)
    ("aioclients.jetstream", "OrderedConsumer.next", "*, expires=30.0", "async"),
    ("aioclients.jetstream", "OrderedConsumer.fetch", "max_messages=None, *, expires=30.0", "sync"),
    ("aioclients.jetstream", "OrderedConsumer.consume", "*, on_event=None", "sync"),
    # MessageStream
    ("aioclients.jetstream", "MessageStream.stop", "", "sync"),
    ("aioclients.jetstream", "MessageStream.drain", "", "async"),
    ("aioclients.jetstream", "MessageStream.statistics", "", "sync"),
    ("aioclients.jetstream", "MessageStream.aclose", "", "async"),
    # Msg
    ("aioclients.jetstream", "Msg.ack", "", "async"),
    ("aioclients.jetstream", "Msg.ack_sync", "timeout=None", "async"),
    ("aioclients.jetstream", "Msg.nak", "delay=None", "async"),
    ("aioclients.jetstream", "Msg.in_progress", "", "async"),
    ("aioclients.jetstream", "Msg.term", "reason=None", "async"),
    # Key-Value
    ("aioclients.jetstream", "KeyValue.get", "key, *, revision=None", "async"),
    ("aioclients.jetstream", "KeyValue.put", "key, value", "async"),
    ("aioclients.jetstream", "KeyValue.create", "key, value, *, ttl=None", "async"),
    ("aioclients.jetstream", "KeyValue.update", "key, value, last", "async"),
    ("aioclients.jetstream", "KeyValue.delete", "key, *, last=None", "async"),
    ("aioclients.jetstream", "KeyValue.purge", "key, *, last=None, ttl=None", "async"),
    ("aioclients.jetstream", "KeyValue.keys", "*filters", "sync"),
    ("aioclients.jetstream", "KeyValue.history", "key", "async"),
    (
        "aioclients.jetstream",
        "KeyValue.watch",
        'keys=">", *, include_history=False, ignore_deletes=False, meta_only=False,'
        " updates_only=False",
        "sync",
    ),
    ("aioclients.jetstream", "KeyValue.status", "", "async"),
    # Object Store
    (
        "aioclients.jetstream",
        "ObjectStore.put",
        "name, data, *, description=None, headers=None, metadata=None, chunk_size=131072",
        "async",
    ),
    ("aioclients.jetstream", "ObjectStore.get", "name", "sync"),
    ("aioclients.jetstream", "ObjectStore.get_bytes", "name", "async"),
    ("aioclients.jetstream", "ObjectStore.info", "name, *, show_deleted=False", "async"),
    (
        "aioclients.jetstream",
        "ObjectStore.update_meta",
        "name, *, new_name=None, description=None, headers=None, metadata=None",
        "async",
    ),
    ("aioclients.jetstream", "ObjectStore.delete", "name", "async"),
    ("aioclients.jetstream", "ObjectStore.add_link", "name, target", "async"),
    ("aioclients.jetstream", "ObjectStore.add_bucket_link", "name, target", "async"),
    ("aioclients.jetstream", "ObjectStore.seal", "", "async"),
    ("aioclients.jetstream", "ObjectStore.list", "*, show_deleted=False", "aiter"),
    (
        "aioclients.jetstream",
        "ObjectStore.watch",
        "*, include_history=False, ignore_deletes=False, updates_only=False",
        "sync",
    ),
    ("aioclients.jetstream", "ObjectStore.status", "", "async"),
    ("aioclients.jetstream", "ObjectReader.read", "", "async"),
    # NSQ
    ("aioclients.nsq", "Reader.is_starved", "", "sync"),
    ("aioclients.nsq", "Reader.set_max_in_flight", "n", "sync"),
    ("aioclients.nsq", "Reader.statistics", "", "sync"),
    ("aioclients.nsq", "Reader.close", "", "async"),
    ("aioclients.nsq", "Reader.run", "handler, *, concurrency=None", "async"),
    ("aioclients.nsq", "Message.finish", "", "async"),
    ("aioclients.nsq", "Message.requeue", "delay=None, *, backoff=True", "async"),
    ("aioclients.nsq", "Message.touch", "", "async"),
    ("aioclients.nsq", "Producer", "nsqd_tcp_address, *, tls=None, auth_secret=None", "class"),
    ("aioclients.nsq", "Producer.publish", "topic, body", "async"),
    ("aioclients.nsq", "Producer.mpublish", "topic, bodies", "async"),
    ("aioclients.nsq", "Producer.dpublish", "topic, body, delay", "async"),
    ("aioclients.nsq", "Producer.close", "", "async"),
    ("aioclients.nsq", "HTTPProducer", "nsqd_http_address", "class"),
    ("aioclients.nsq", "HTTPProducer.publish", "topic, body", "async"),
    ("aioclients.nsq", "HTTPProducer.mpublish", "topic, bodies", "async"),
    ("aioclients.nsq", "HTTPProducer.dpublish", "topic, body, delay", "async"),
    # Liftbridge
    (
        "aioclients.liftbridge",
        "connect",
        "addresses: str | list[str], *, tls=None, resubscribe_wait_time=30.0,"
        " ack_wait_time=5.0, max_conns_per_broker=2, keepalive_time=30.0, **options",
        "async",
    ),
    ("aioclients.liftbridge", "Client.close", "", "async"),
    (
        "aioclients.liftbridge",
        "Client.create_stream",
        "subject, name, *, group=None, replication_factor=1, max_replication=False,"
        " partitions=1, **stream_options",
        "async",
    ),
    ("aioclients.liftbridge", "Client.delete_stream", "name", "async"),
    (
        "aioclients.liftbridge",
        "Client.pause_stream",
        "name, *, partitions=None, resume_all=False",
        "async",
    ),
    (
        "aioclients.liftbridge",
        "Client.set_stream_readonly",
        "name, *, partitions=None, readonly=True",
        "async",
    ),
    (
        "aioclients.liftbridge",
        "Client.publish",
        "stream, value, *, key=None, headers=None, partition=None, partitioner=None,"
        " ack_policy=AckPolicy.LEADER, expected_offset=None, correlation_id=None,"
        " timeout=None",
        "async",
    ),
    (
        "aioclients.liftbridge",
        "Client.publish_async",
        "stream, value, *, key=None, headers=None, partition=None, partitioner=None,"
        " ack_policy=AckPolicy.LEADER, expected_offset=None, correlation_id=None,"
        " timeout=None",
        "async",
    ),
    (
        "aioclients.liftbridge",
        "Client.publish_to_subject",
        "subject, value, *, key=None, headers=None, ack_inbox=None, correlation_id=None,"
        " ack_policy=AckPolicy.LEADER, timeout=None",
        "async",
    ),
    (
        "aioclients.liftbridge",
        "Client.subscribe",
        "stream, *, partition=0, start_at=StartPosition.NEW_ONLY, start_offset=None,"
        " start_time=None, start_time_delta=None, stop_at=None, stop_offset=None,"
        " stop_time=None, read_isr_replica=False, resume=False",
        "sync",
    ),
    ("aioclients.liftbridge", "Client.fetch_metadata", "", "async"),
    ("aioclients.liftbridge", "Client.fetch_partition_metadata", "stream, partition", "async"),
    (
        "aioclients.liftbridge",
        "Client.set_cursor",
        "cursor_id, stream, partition, offset",
        "async",
    ),
    ("aioclients.liftbridge", "Client.fetch_cursor", "cursor_id, stream, partition", "async"),
    ("aioclients.liftbridge", "Metadata.brokers", "", "sync"),
    ("aioclients.liftbridge", "Metadata.addresses", "", "sync"),
    ("aioclients.liftbridge", "Metadata.get_stream", "name", "sync"),
    ("aioclients.liftbridge", "Metadata.partition_counts_for_subject", "subject", "sync"),
    (
        "aioclients.liftbridge",
        "new_message",
        "value, *, key=None, headers=None, ack_inbox=None, correlation_id=None,"
        " ack_policy=AckPolicy.LEADER",
        "sync",
    ),
    ("aioclients.liftbridge", "unmarshal_message", "data", "sync"),
    ("aioclients.liftbridge", "unmarshal_ack", "data", "sync"),
    # Spark, telemetry
    ("aioclients.spark", "register_data_sources", "spark", "sync"),
    ("aioclients.telemetry", "AioClientsInstrumentor", "", "class"),
    ("aioclients.telemetry", "context_of", "msg", "sync"),
    # Testing
    ("aioclients.testing", "NatsServer.stop", "", "sync"),
    ("aioclients.testing", "NatsServer.start", "", "sync"),
    ("aioclients.testing", "NatsServer.restart", "", "sync"),
    ("aioclients.testing", "LiftbridgeCluster", "brokers=1, *, nats_url=None", "class"),
    ("aioclients.testing", "LiftbridgeCluster.stop_broker", "i", "async"),
    ("aioclients.testing", "LiftbridgeCluster.start_broker", "i", "async"),
    ("aioclients.testing", "FaultProxy", "target", "class"),
    ("aioclients.testing", "FaultProxy.refuse", "flag=True", "sync"),
    ("aioclients.testing", "FaultProxy.delay", "seconds", "sync"),
    ("aioclients.testing", "FaultProxy.freeze", "", "sync"),
    ("aioclients.testing", "FaultProxy.thaw", "", "sync"),
    ("aioclients.testing", "FaultProxy.reset", "", "sync"),
]


def _resolve(module: str, dotted: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _contract_parameters(module: str, text: str) -> list[inspect.Parameter]:
    """The contract's parameter list as inspect.Parameter objects (defaults evaluated in
    the module, so ``AckPolicy.LEADER`` is the module's own member)."""
    function = ast.parse(f"def f({text}): pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    args = function.args
    namespace = vars(importlib.import_module(module))

    def value(node: ast.expr) -> object:
        return eval(compile(ast.Expression(node), "<contract>", "eval"), dict(namespace))

    params: list[inspect.Parameter] = []
    positional = args.args
    defaults = [P.empty] * (len(positional) - len(args.defaults)) + [
        value(d) for d in args.defaults
    ]
    for arg, default in zip(positional, defaults, strict=True):
        params.append(P(arg.arg, P.POSITIONAL_OR_KEYWORD, default=default))
    if args.vararg is not None:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        default = P.empty if kw_default is None else value(kw_default)
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=default))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return params


def _actual_parameters(obj: Any, kind: str) -> list[inspect.Parameter]:
    if kind == "class":
        return list(inspect.signature(obj).parameters.values())
    params = list(inspect.signature(obj).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return params


def _same_default(actual: object, expected: object) -> bool:
    if expected is P.empty:
        return True  # a default where the contract has none keeps every call working
    return type(actual) is type(expected) and actual == expected


def _mismatches(actual: list[inspect.Parameter], expected: list[inspect.Parameter]) -> list[str]:
    problems: list[str] = []
    by_name = {p.name: p for p in actual}
    positional = [p for p in actual if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    for index, want in enumerate(expected):
        if want.kind is P.VAR_KEYWORD:
            if not any(p.kind is P.VAR_KEYWORD for p in actual):
                problems.append(f"no **{want.name}")
            continue
        if want.kind is P.VAR_POSITIONAL:
            if not any(p.kind is P.VAR_POSITIONAL for p in actual):
                problems.append(f"no *{want.name}")
            continue
        got = by_name.get(want.name)
        if got is None:
            var_kw = any(p.kind is P.VAR_KEYWORD for p in actual)
            if not (want.kind is P.KEYWORD_ONLY and var_kw):
                problems.append(f"{want.name}: missing")
            elif want.default is not P.empty:
                problems.append(f"{want.name}: only through **kwargs, default unknown")
            continue
        if want.kind is P.POSITIONAL_OR_KEYWORD:
            if got.kind is not P.POSITIONAL_OR_KEYWORD:
                problems.append(f"{want.name}: {got.kind.description}, not positional")
            elif positional.index(got) != index:
                problems.append(f"{want.name}: at position {positional.index(got)}, not {index}")
        elif got.kind is not P.KEYWORD_ONLY:
            problems.append(f"{want.name}: {got.kind.description}, not keyword-only")
        if not _same_default(got.default, want.default):
            problems.append(f"{want.name}: default {got.default!r}, not {want.default!r}")
    named = {p.name for p in expected}
    for got in actual:
        if got.name in named or got.kind in (P.VAR_KEYWORD, P.VAR_POSITIONAL):
            continue
        if got.default is P.empty:
            problems.append(f"{got.name}: required, but not in the contract")
    return problems


def _call_kind_mismatch(obj: Any, kind: str) -> str | None:
    if kind == "class":
        return None if inspect.isclass(obj) else "not a class"
    coroutine = inspect.iscoroutinefunction(obj)
    if kind == "async":
        return None if coroutine else "not a coroutine function"
    # "sync" and "aiter": called without await (an async generator function is fine for
    # an async iterator, a coroutine function is not)
    if coroutine:
        return "a coroutine function, not a plain call"
    if kind == "sync" and inspect.isasyncgenfunction(obj):
        return "an async generator function: not a context manager"
    return None


@pytest.mark.parametrize(
    ("module", "name", "params", "kind"), SIGNATURES, ids=[f"{m}.{n}" for m, n, _, _ in SIGNATURES]
)
def test_signature_matches_the_contract(module: str, name: str, params: str, kind: str) -> None:
    if module == "aioclients.spark":
        pytest.importorskip("pyspark")
    if module == "aioclients.telemetry":
        pytest.importorskip("opentelemetry.instrumentation")
    obj = _resolve(module, name)
    call_problem = _call_kind_mismatch(obj, kind)
    assert call_problem is None, call_problem
    expected = _contract_parameters(module, params)
    assert _mismatches(_actual_parameters(obj, kind), expected) == []


def _checker_cases() -> list[tuple[Callable[..., Any], str, list[str]]]:
    def good(a, b=1, *, c=None, **kw): ...  # type: ignore[no-untyped-def]

    return [
        (good, "a, b=1, *, c=None, **kw", []),
        (good, "a, b=2, *, c=None, **kw", ["b: default 1, not 2"]),
        (good, "a, b=1.0, *, c=None", ["b: default 1, not 1.0"]),
        (good, "a, *, b=1, c=None", ["b: positional or keyword, not keyword-only"]),
        (
            good,
            "b=1, *, c=None",
            ["b: at position 1, not 0", "a: required, but not in the contract"],
        ),
        (good, "a, b=1, c=None", ["c: keyword-only, not positional"]),
        (good, "a, b=1, *, c=None, d=3", ["d: only through **kwargs, default unknown"]),
        (good, "a, b=1, *, c=None, d", []),  # a required keyword: **kw takes it
        (good, "a", []),  # b and c have defaults
        (
            good,
            "x, a, b=1",
            ["x: missing", "a: at position 0, not 1", "b: at position 1, not 2"],
        ),
        (good, "a, b=1, *, c=None, e=None", ["e: only through **kwargs, default unknown"]),
        (lambda a, b: None, "a, *, b", ["b: positional or keyword, not keyword-only"]),
        (lambda a, *, b: None, "a", ["b: required, but not in the contract"]),
        (lambda *names: None, "*names", []),
        (lambda a: None, "a, **config", ["no **config"]),
        (lambda a: None, "*names", ["no *names", "a: required, but not in the contract"]),
    ]


@pytest.mark.parametrize(("func", "params", "problems"), _checker_cases())
def test_the_checker_finds_each_kind_of_mismatch(
    func: Callable[..., Any], params: str, problems: list[str]
) -> None:
    found = _mismatches(_actual_parameters(func, "sync"), _contract_parameters("inspect", params))
    assert found == problems


def test_the_checker_tells_calls_apart() -> None:
    async def coroutine() -> None: ...

    async def agen() -> Any:
        yield 1

    def plain() -> None: ...

    assert _call_kind_mismatch(coroutine, "async") is None
    assert _call_kind_mismatch(plain, "async") == "not a coroutine function"
    assert _call_kind_mismatch(coroutine, "sync") == "a coroutine function, not a plain call"
    assert _call_kind_mismatch(agen, "aiter") is None
    assert _call_kind_mismatch(agen, "sync") is not None
    assert _call_kind_mismatch(plain, "class") == "not a class"


# -- attributes --------------------------------------------------------------------------

# (module, class, the attributes the contract names on it)
ATTRIBUTES: list[tuple[str, str, str]] = [
    ("aioclients.jetstream", "PubAck", "stream seq duplicate"),
    ("aioclients.jetstream", "StoredMessage", "subject seq data headers time"),
    ("aioclients.jetstream", "StreamInfo", "config state"),
    ("aioclients.jetstream", "StreamState", "messages bytes first_seq last_seq num_subjects"),
    (
        "aioclients.jetstream",
        "ConsumerInfo",
        "config num_pending num_ack_pending num_redelivered num_waiting delivered ack_floor"
        " priority_groups paused pause_remaining",
    ),
    ("aioclients.jetstream", "Stream", "name cached_info"),
    ("aioclients.jetstream", "Consumer", "name stream_name cached_info"),
    ("aioclients.jetstream", "MessageStream", "pin_id"),
    ("aioclients.jetstream", "JetStream", "publish_async_pending"),
    ("aioclients.jetstream", "Msg", "subject data headers reply metadata"),
    (
        "aioclients.jetstream",
        "MsgMetadata",
        "stream consumer sequence num_delivered num_pending timestamp",
    ),
    ("aioclients.jetstream", "SequencePair", "stream consumer"),
    ("aioclients.jetstream", "Pinned", "pin_id"),
    ("aioclients.jetstream", "StatusWarning", "code description"),
    ("aioclients.jetstream", "ConsumerReset", "next_seq"),
    ("aioclients.jetstream", "KeyValue", "bucket"),
    (
        "aioclients.jetstream",
        "KeyValueEntry",
        "bucket key value revision created delta operation",
    ),
    ("aioclients.jetstream", "KeyWatcher", "initial_done"),
    ("aioclients.jetstream", "ObjectStore", "bucket"),
    (
        "aioclients.jetstream",
        "ObjectInfo",
        "bucket name nuid size chunks digest modified deleted description headers metadata link",
    ),
    ("aioclients.jetstream", "ObjectReader", "info"),
    ("aioclients.jetstream", "ObjectWatcher", "initial_done"),
    ("aioclients.jetstream", "BatchAck", "stream seq batch_id count"),
    ("aioclients.jetstream", "ConsumerPause", "paused pause_until pause_remaining"),
    ("aioclients.nsq", "Message", "id body timestamp attempts nsqd_address has_responded"),
    (
        "aioclients.liftbridge",
        "Message",
        "stream partition offset key value timestamp headers subject reply_subject ack_inbox"
        " correlation_id ack_policy",
    ),
    (
        "aioclients.liftbridge",
        "Ack",
        "stream partition offset partition_subject msg_subject ack_inbox correlation_id"
        " ack_policy reception_timestamp commit_timestamp ack_error",
    ),
    ("aioclients.liftbridge", "Metadata", "last_updated"),
    ("aioclients.liftbridge", "BrokerInfo", "id host port"),
    ("aioclients.liftbridge", "StreamInfo", "name subject partitions"),
    ("aioclients.liftbridge", "PartitionInfo", "id leader replicas isr"),
    ("aioclients.testing", "NatsServer", "url"),
    ("aioclients.testing", "NsqdEmulator", "tcp_address http_address"),
    ("aioclients.testing", "NsqlookupdEmulator", "tcp_address http_address"),
    ("aioclients.testing", "LiftbridgeCluster", "addresses"),
    ("aioclients.testing", "FaultProxy", "address"),
]


def _assigned_on_self(cls: type) -> set[str]:
    """The ``self.<name> = ...`` targets in the methods of ``cls`` and its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        for node in ast.walk(ast.parse(source)):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    names.add(target.attr)
    return names


def _has_attribute(cls: type, name: str) -> bool:
    """A property, method, slot, class attribute, dataclass or NamedTuple field, an
    annotated attribute, or one the class's methods set on ``self``."""
    if name in dir(cls):
        return True
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    if any(name in getattr(klass, "__annotations__", {}) for klass in cls.__mro__):
        return True
    return name in _assigned_on_self(cls)


@pytest.mark.parametrize(
    ("module", "cls", "name"),
    [(m, c, n) for m, c, names in ATTRIBUTES for n in names.split()],
    ids=[f"{c}.{n}" for _, c, names in ATTRIBUTES for n in names.split()],
)
def test_attribute_the_contract_names_exists(module: str, cls: str, name: str) -> None:
    assert _has_attribute(_resolve(module, cls), name)


def test_the_attribute_check_can_fail() -> None:
    class Handle:
        def __init__(self) -> None:
            self.name = "x"

    assert _has_attribute(Handle, "name")
    assert not _has_attribute(Handle, "stream_name")


def test_the_properties_the_contract_calls_properties_are_properties() -> None:
    import aioclients.jetstream as js
    import aioclients.nsq as nsq

    assert isinstance(inspect.getattr_static(js.JetStream, "publish_async_pending"), property)
    assert isinstance(inspect.getattr_static(nsq.Message, "has_responded"), property)


# -- errors and enums --------------------------------------------------------------------

# (module, error, the base the contract puts it under)
ERROR_BASES: list[tuple[str, str, str]] = (
    [
        ("aioclients.jetstream", name, "aioclients.jetstream.JetStreamError")
        for name in (
            "StreamNotFoundError ConsumerNotFoundError MessageNotFoundError NoMessagesError"
            " ConsumerDeletedError NoHeartbeatError MessageAlreadyAckedError TooManySubjectsError"
            " BucketNotFoundError KeyNotFoundError KeyExistsError KeyWrongRevisionError"
            " ObjectNotFoundError DigestMismatchError LinkIsABucketError BucketSealedError"
            " BatchAbortedError ServerTooOldError"
        ).split()
    ]
    + [
        ("aioclients.jetstream", "JetStreamError", "aioclients.AioClientsError"),
        ("aioclients.jetstream", "KeyDeletedError", "aioclients.jetstream.KeyNotFoundError"),
        ("aioclients.jetstream", "ObjectDeletedError", "aioclients.jetstream.ObjectNotFoundError"),
        ("aioclients.jetstream", "NoMessagesError", "builtins.TimeoutError"),
        ("aioclients.jetstream", "NoHeartbeatError", "builtins.TimeoutError"),
        ("aioclients.jetstream", "APITimeoutError", "builtins.TimeoutError"),
        ("aioclients.nsq", "NSQError", "aioclients.AioClientsError"),
        ("aioclients.nsq", "NSQProtocolError", "aioclients.AioClientsError"),
        ("aioclients.liftbridge", "LiftbridgeError", "aioclients.AioClientsError"),
        ("aioclients.liftbridge", "LiftbridgeTimeoutError", "builtins.TimeoutError"),
    ]
    + [
        ("aioclients.liftbridge", name, "aioclients.liftbridge.LiftbridgeError")
        for name in (
            "StreamExistsError NoSuchStreamError NoSuchPartitionError ReadonlyPartitionError"
            " EnvelopeError"
        ).split()
    ]
)


@pytest.mark.parametrize(
    ("module", "name", "base"), ERROR_BASES, ids=[f"{n}<{b}" for _, n, b in ERROR_BASES]
)
def test_error_derives_from_the_contract_s_base(module: str, name: str, base: str) -> None:
    base_module, _, base_name = base.rpartition(".")
    assert issubclass(_resolve(module, name), _resolve(base_module, base_name))


@pytest.mark.parametrize(
    "module", ["aioclients.jetstream", "aioclients.nsq", "aioclients.liftbridge"]
)
def test_a_closed_client_error_exists_and_is_named_so(module: str) -> None:
    import aioclients

    package = importlib.import_module(module)
    closed = [
        getattr(package, n)
        for n in package.__all__
        if n.endswith("ClosedError") and issubclass(getattr(package, n), aioclients.AioClientsError)
    ]
    assert closed


def test_jetstream_error_carries_the_server_s_codes() -> None:
    from aioclients.jetstream import JetStreamError

    error = JetStreamError("stream not found", code=404, err_code=10059)
    assert (error.code, error.err_code, error.description) == (404, 10059, "stream not found")


def test_nsq_error_carries_its_code() -> None:
    from aioclients.nsq import NSQError

    assert NSQError("E_BAD_TOPIC", "PUB topic name is not valid").code == "E_BAD_TOPIC"


ENUMS: list[tuple[str, str, str]] = [
    ("aioclients.liftbridge", "StartPosition", "NEW_ONLY OFFSET EARLIEST LATEST TIMESTAMP"),
    ("aioclients.liftbridge", "AckPolicy", "LEADER ALL NONE"),
]


@pytest.mark.parametrize(("module", "name", "members"), ENUMS, ids=[n for _, n, _ in ENUMS])
def test_enum_has_the_contract_s_members(module: str, name: str, members: str) -> None:
    cls = _resolve(module, name)
    assert issubclass(cls, enum.Enum)
    assert set(members.split()) <= set(cls.__members__)


# The names the contract lists that the signatures above do not cover.
EXPORTED: list[tuple[str, str]] = [
    ("aioclients", "__version__"),
    ("aioclients", "AioClientsError"),
    ("aioclients", "InvalidArgumentError"),
    ("aioclients.jetstream", "HeartbeatMissed"),
    ("aioclients.jetstream", "Pinned"),
    ("aioclients.jetstream", "Unpinned"),
    ("aioclients.jetstream", "StatusWarning"),
    ("aioclients.jetstream", "Disconnected"),
    ("aioclients.jetstream", "Reconnected"),
    ("aioclients.jetstream", "ConsumerReset"),
    ("aioclients.jetstream", "AccountInfo"),
    ("aioclients.liftbridge", "StopPosition"),
    ("aioclients.liftbridge", "Partitioner"),
    ("aioclients.liftbridge", "PartitionByKey"),
    ("aioclients.liftbridge", "PartitionByRoundRobin"),
    ("aioclients.testing", "NsqdEmulator"),
    ("aioclients.testing", "NsqlookupdEmulator"),
]


@pytest.mark.parametrize(("module", "name"), EXPORTED, ids=[n for _, n in EXPORTED])
def test_name_is_exported(module: str, name: str) -> None:
    package = importlib.import_module(module)
    assert hasattr(package, name)
    if name != "__version__":
        assert name in package.__all__


def test_the_version_is_a_string() -> None:
    import aioclients

    assert isinstance(aioclients.__version__, str)


@pytest.mark.parametrize("fixture", ["nats_server", "nsqd", "nsqlookupd", "liftbridge_cluster"])
def test_the_pytest_plugin_provides_the_fixture(fixture: str) -> None:
    plugin = importlib.import_module("aioclients.testing.pytest_plugin")
    assert hasattr(plugin, fixture)
