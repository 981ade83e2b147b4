"""Batched Direct Get against a server that predates it (nats-server < 2.11).

Such a server answers a batch request with the first message only and without
``Nats-Num-Pending`` (ADR-31). No old server is installable here, so a responder
on the real nats-server plays one: it answers ``$JS.API.DIRECT.GET.<stream>`` the
way an old server does.
"""

from __future__ import annotations

import json

import nats
import pytest
from nats.aio.msg import Msg

from aioclients.jetstream import JetStream, ServerTooOldError, Stream, StreamInfo


async def test_batch_against_an_old_server_says_so(nats_server: object, unique_name: str) -> None:
    nc = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    requests: list[dict[str, object]] = []

    async def old_server(msg: Msg) -> None:
        requests.append(json.loads(msg.data))
        await nc.publish(
            msg.reply,
            b"first",
            headers={
                "Nats-Stream": unique_name,
                "Nats-Subject": "old.a",
                "Nats-Sequence": "1",
                "Nats-Time-Stamp": "2022-08-06 00:29:27.587861324 +0000 UTC",
            },
        )

    sub = await nc.subscribe(f"$JS.API.DIRECT.GET.{unique_name}", cb=old_server)
    try:
        js = JetStream(nc, timeout=2.0)
        info = StreamInfo.from_json({"config": {"name": unique_name}})
        stream = Stream(js._jsapi, unique_name, info)  # a handle takes the request layer
        # A single Direct Get works the same on old servers (and their time format).
        single = await stream.direct_get(seq=1)
        assert (single.subject, single.seq, single.data) == ("old.a", 1, b"first")
        assert single.time.year == 2022
        batch = stream.direct_get_batch(batch=10)
        # The very first reply gives it away: no message may come out of an answer
        # that we cannot trust to be complete.
        with pytest.raises(ServerTooOldError, match=r"2\.11"):
            await batch.__anext__()
        assert requests[-1] == {"batch": 10, "seq": 1}
    finally:
        await sub.unsubscribe()
        await nc.close()
