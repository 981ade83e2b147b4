"""Topics, channels and in-flight messages of the nsqd emulator: a pure state machine.

Theory of operation (nsqd v1.3's ``topic.go``, ``channel.go`` and the counters of
``client_v2.go``). A :class:`Topic` keeps the messages published while it has no
channel, or while it is paused, in its backlog (its ``depth``) and hands every
other message to each of its channels, the first channel the published object
and the others a copy. A :class:`Channel` holds a message in one of four places:

* queued (``depth``): waiting for a consumer with room (RDY above its in-flight
  count); a paused channel keeps its queue;
* in flight on exactly one :class:`Consumer`, until that consumer finishes it
  (FIN: gone), re-queues it (REQ: queued again, or deferred for the given delay)
  or its deadline passes (``msg_timeout`` after delivery, moved by TOUCH up to
  ``max_msg_timeout`` after delivery): queued again, ``timeout_count`` + 1;
* deferred (DPUB, REQ with a delay): queued when its time comes;
* gone: finished, emptied (``/channel/empty``), or dropped by ``sample_rate``.

Each delivery adds one to the message's ``attempts``. A message stays in flight
on a consumer that unsubscribed (its connection closed) until it times out. FIN,
REQ and TOUCH of an id the channel does not have in flight, or that another
consumer holds, raise :class:`LookupError` with nsqd's text (``ID not in flight``,
``client does not own message``); the server answers ``E_FIN_FAILED`` etc.

Nothing here reads a clock, draws a random number of its own, or does I/O. Time
is an argument (``now``: seconds on the driver's monotonic clock; message time
stamps: ns since the epoch, from the caller). The driver:

* delivers: when :attr:`NsqdState.dispatch_pending`, it calls
  :meth:`NsqdState.dispatch` once per event-loop turn (so a burst of FINs becomes
  one batch of new messages per consumer) and writes each consumer's messages;
* times: it arms one timer at :meth:`NsqdState.next_deadline` and calls
  :meth:`NsqdState.handle_timer` when it fires (in-flight deadlines and deferred
  messages of every channel: FIFOs per ``msg_timeout`` value, a heap for TOUCHed
  and one for deferred messages; no timer per message);
* registers: :meth:`NsqdState.take_registry_changes` lists the topics and channels
  created and deleted since the last call (for nsqlookupd).

The server checks what the protocol checks (command syntax, limits such as
``max_rdy_count``, auth); this module keeps what nsqd's topics and channels keep.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

__all__ = (
    "Channel",
    "Consumer",
    "Message",
    "NsqdState",
    "RegistryChange",
    "Topic",
)

_INF = float("inf")


class Message:
    """One message on one channel (a topic's other channels hold copies)."""

    __slots__ = (
        "attempts",
        "body",
        "consumer",
        "deadline",
        "defer",
        "delivered_at",
        "id",
        "timestamp",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, defer: float = 0.0) -> None:
        self.id = msg_id
        self.body = body
        #: ns since the epoch, when it was published
        self.timestamp = timestamp
        #: deliveries so far
        self.attempts = 0
        #: seconds to wait once it reaches a channel (DPUB)
        self.defer = defer
        #: the consumer it is in flight on
        self.consumer: Consumer | None = None
        self.deadline = 0.0
        self.delivered_at = 0.0

    def copy(self) -> Message:
        """The copy a topic's second and later channels get."""
        return Message(self.id, self.body, self.timestamp, self.defer)

    def __repr__(self) -> str:
        return f"<Message {self.id.decode()} attempts={self.attempts}>"


class Consumer:
    """One client subscribed to a channel: its RDY and what it has in flight.

    Created by :meth:`NsqdState.subscribe`; the counters are those nsqd's
    ``/stats`` reports per client.
    """

    __slots__ = (
        "_batch",
        "_fifo",
        "channel",
        "closing",
        "finish_count",
        "in_flight",
        "message_count",
        "msg_timeout",
        "rdy",
        "requeue_count",
        "sample_rate",
    )

    def __init__(self, channel: Channel, msg_timeout: float, sample_rate: int) -> None:
        self.channel = channel
        self.msg_timeout = msg_timeout
        self.sample_rate = sample_rate
        self.rdy = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        #: after CLS: no more deliveries, RDY ignored
        self.closing = False
        self._batch: list[Message] = []
        self._fifo = channel._timeout_fifo(msg_timeout)

    def __repr__(self) -> str:
        return f"<Consumer of {self.channel} rdy={self.rdy} in_flight={self.in_flight}>"


@dataclass(frozen=True, slots=True)
class RegistryChange:
    """A topic (``channel`` None) or channel that came to exist or stopped existing."""

    topic: str
    channel: str | None
    registered: bool


class Channel:
    """One channel of a topic (nsqd's ``Channel``)."""

    def __init__(self, state: NsqdState, topic: Topic, name: str) -> None:
        self._state = state
        self.topic = topic
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        self.deleted = False
        self.queue: collections.deque[Message] = collections.deque()
        self.in_flight: dict[bytes, Message] = {}
        self.consumers: list[Consumer] = []
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        # In-flight deadlines: one FIFO per msg_timeout value (deadlines only grow
        # in each, so appending keeps them sorted) plus a heap for TOUCHed ones.
        self._timeout_fifos: dict[float, collections.deque[tuple[float, Message]]] = {}
        self._touched: list[tuple[float, int, Message]] = []
        self._deferred: list[tuple[float, int, Message]] = []
        self._seq = 0
        #: the deadline this channel is registered for in the state's timer heap
        self.timer_at = _INF
        self._dispatch_pending = False
        self._rr = 0

    def __repr__(self) -> str:
        return f"{self.topic.name}/{self.name}"

    # -- counts (/stats) --------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages queued (not in flight, not deferred)."""
        return len(self.queue)

    @property
    def in_flight_count(self) -> int:
        """Messages in flight."""
        return len(self.in_flight)

    @property
    def deferred_count(self) -> int:
        """Messages deferred (DPUB, REQ with a delay)."""
        return len(self._deferred)

    # -- queueing -----------------------------------------------------------------------

    def put(self, messages: Iterable[Message], now: float) -> None:
        """Queue messages from the topic (deferred ones wait ``defer`` seconds)."""
        count = 0
        for m in messages:
            count += 1
            if m.defer > 0:
                self._defer(m, now + m.defer)
            else:
                self.queue.append(m)
        self.message_count += count
        self._wake()

    def _defer(self, msg: Message, due: float) -> None:
        self._seq += 1
        heapq.heappush(self._deferred, (due, self._seq, msg))
        self._arm()

    # -- what consumers do ------------------------------------------------------------------

    def _take(self, consumer: Consumer, msg_id: bytes) -> Message:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.consumer is not consumer:
            raise LookupError("client does not own message")
        del self.in_flight[msg_id]
        msg.consumer = None
        consumer.in_flight -= 1
        return msg

    def finish(self, consumer: Consumer, msg_id: bytes) -> None:
        """FIN: the message is done.

        Raises:
            LookupError: ``msg_id`` is not in flight, or not on ``consumer``.
        """
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.consumer is not consumer:
            raise LookupError("client does not own message")
        del self.in_flight[msg_id]
        msg.consumer = None
        consumer.in_flight -= 1
        consumer.finish_count += 1
        if self.queue and not self._dispatch_pending:
            self._wake()

    def requeue(self, consumer: Consumer, msg_id: bytes, delay: float, now: float) -> None:
        """REQ: queue the message again, at once or after ``delay`` seconds.

        Raises:
            LookupError: ``msg_id`` is not in flight, or not on ``consumer``.
        """
        msg = self._take(consumer, msg_id)
        consumer.requeue_count += 1
        self.requeue_count += 1
        if delay <= 0:
            self.queue.append(msg)
        else:
            self._defer(msg, now + delay)
        self._wake()

    def touch(self, consumer: Consumer, msg_id: bytes, now: float, max_msg_timeout: float) -> None:
        """TOUCH: the message's deadline is ``msg_timeout`` from ``now``, but no later
        than ``max_msg_timeout`` after its delivery.

        Raises:
            LookupError: ``msg_id`` is not in flight, or not on ``consumer``.
        """
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.consumer is not consumer:
            raise LookupError("client does not own message")
        msg.deadline = min(now + consumer.msg_timeout, msg.delivered_at + max_msg_timeout)
        self._seq += 1
        heapq.heappush(self._touched, (msg.deadline, self._seq, msg))
        self._arm()

    def ready(self, consumer: Consumer, count: int) -> None:
        """RDY: ``consumer`` may hold ``count`` messages in flight (ignored after CLS)."""
        if consumer.closing:
            return
        consumer.rdy = count
        if count > consumer.in_flight:
            self._wake()

    def close_wait(self, consumer: Consumer) -> None:
        """CLS: no more deliveries to ``consumer``; it finishes what it holds."""
        consumer.rdy = 0
        consumer.closing = True

    # -- admin (HTTP) -------------------------------------------------------------------

    def pause(self) -> None:
        """Stop delivering (the queue keeps filling; in flight messages go on)."""
        self.paused = True

    def unpause(self) -> None:
        """Deliver again."""
        self.paused = False
        self._wake()

    def empty(self) -> None:
        """Drop every queued, in-flight and deferred message (nsqd's ``Channel.Empty``):
        the consumers' in-flight counts go to 0, their FINs of those ids fail."""
        for msg in self.in_flight.values():
            msg.consumer = None
        self.in_flight.clear()
        self.queue.clear()
        self._deferred.clear()
        self._touched.clear()
        for fifo in self._timeout_fifos.values():
            fifo.clear()
        for consumer in self.consumers:
            consumer.in_flight = 0
        self._wake()

    # -- timers -------------------------------------------------------------------------

    def _timeout_fifo(self, msg_timeout: float) -> collections.deque[tuple[float, Message]]:
        fifo = self._timeout_fifos.get(msg_timeout)
        if fifo is None:
            fifo = self._timeout_fifos[msg_timeout] = collections.deque()
        return fifo

    def next_deadline(self) -> float:
        """When the next deferred message is due or in-flight message times out (inf: never)."""
        due = _INF
        if self._touched:
            due = self._touched[0][0]
        if self._deferred and self._deferred[0][0] < due:
            due = self._deferred[0][0]
        for fifo in self._timeout_fifos.values():
            if fifo and fifo[0][0] < due:
                due = fifo[0][0]
        return due

    def _arm(self) -> None:
        due = self.next_deadline()
        if due < self.timer_at:
            self.timer_at = due
            self._state._arm(due, self)

    def _expire(self, now: float) -> None:
        """Queue the deferred messages that are due and time out the in-flight ones."""
        self.timer_at = _INF
        moved = False
        deferred = self._deferred
        while deferred and deferred[0][0] <= now:
            self.queue.append(heapq.heappop(deferred)[2])
            moved = True
        expired: list[tuple[float, Message]] = []
        for fifo in self._timeout_fifos.values():
            while fifo and fifo[0][0] <= now:
                expired.append(fifo.popleft())
        touched = self._touched
        while touched and touched[0][0] <= now:
            deadline, _, msg = heapq.heappop(touched)
            expired.append((deadline, msg))
        expired.sort(key=lambda entry: entry[0])
        in_flight = self.in_flight
        for deadline, msg in expired:
            consumer = msg.consumer
            if consumer is None or msg.deadline != deadline or in_flight.get(msg.id) is not msg:
                continue  # finished, re-queued or touched since
            del in_flight[msg.id]
            msg.consumer = None
            consumer.in_flight -= 1
            self.timeout_count += 1
            self.queue.append(msg)
            moved = True
        self._arm()
        if moved:
            self._wake()

    # -- delivery -----------------------------------------------------------------------

    def _wake(self) -> None:
        if not self._dispatch_pending and self.queue and self.consumers and not self.paused:
            self._dispatch_pending = True
            self._state._wake(self)

    def _dispatch(self, now: float, out: list[tuple[Consumer, list[Message]]]) -> None:
        """Hand queued messages to consumers with room, round-robin from a start that
        moves by one each time, one message per consumer per round."""
        self._dispatch_pending = False
        consumers = self.consumers
        queue = self.queue
        if not queue or not consumers or self.paused or self.deleted:
            return
        self._rr = rr = (self._rr + 1) % len(consumers)
        ready = [
            c for c in consumers[rr:] + consumers[:rr] if not c.closing and c.rdy > c.in_flight
        ]
        if not ready:
            return
        served = ready
        in_flight = self.in_flight
        rng = self._state.rng
        while queue and ready:
            still_ready = []
            for c in ready:
                if not queue:
                    break
                msg = queue.popleft()
                if c.sample_rate and rng.randrange(100) > c.sample_rate:
                    still_ready.append(c)  # nsqd drops the message for this client
                    continue
                msg.attempts += 1
                msg.consumer = c
                msg.delivered_at = now
                msg.deadline = deadline = now + c.msg_timeout
                in_flight[msg.id] = msg
                c._fifo.append((deadline, msg))
                c.in_flight += 1
                c.message_count += 1
                c._batch.append(msg)
                if c.rdy > c.in_flight:
                    still_ready.append(c)
            ready = still_ready
        self._arm()
        for c in served:
            if c._batch:
                out.append((c, c._batch))
                c._batch = []

    # -- restart ------------------------------------------------------------------------

    def _flush_for_restart(self) -> None:
        """What nsqd does on exit (``Channel.flush``): in-flight and deferred messages
        are saved after the queued ones, so after a restart the queued ones come first."""
        msgs = sorted(self.in_flight.values(), key=lambda m: m.delivered_at)
        self.in_flight.clear()
        for m in msgs:
            m.consumer = None
        msgs.extend(entry[2] for entry in sorted(self._deferred, key=lambda e: e[:2]))
        self._deferred.clear()
        self._timeout_fifos.clear()
        self._touched.clear()
        self.queue.extend(msgs)
        self.consumers.clear()
        self.timer_at = _INF
        self._dispatch_pending = False  # the state forgets what was to be dispatched


class Topic:
    """One topic (nsqd's ``Topic``)."""

    def __init__(self, state: NsqdState, name: str) -> None:
        self._state = state
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        self._channels: dict[str, Channel] = {}
        # messages published while the topic had no channel or was paused (nsqd keeps them)
        self.backlog: collections.deque[Message] = collections.deque()
        self.message_count = 0
        self.message_bytes = 0

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"

    @property
    def channels(self) -> Mapping[str, Channel]:
        """The channels, by name, in creation order."""
        return self._channels

    @property
    def depth(self) -> int:
        """Messages waiting for a channel (or for the topic to be unpaused)."""
        return len(self.backlog)

    def _put(self, messages: list[Message], now: float) -> None:
        self.message_count += len(messages)
        self.message_bytes += sum(len(m.body) for m in messages)
        if not self._channels or self.paused:
            self.backlog.extend(messages)
            return
        self._fan_out(messages, now)

    def _fan_out(self, messages: list[Message], now: float) -> None:
        first = True
        for channel in self._channels.values():
            channel.put(messages if first else [m.copy() for m in messages], now)
            first = False

    def _flush_backlog(self, now: float) -> None:
        if self.backlog and self._channels and not self.paused:
            backlog, self.backlog = list(self.backlog), collections.deque()
            self._fan_out(backlog, now)


class NsqdState:
    """Every topic, channel and message of one nsqd.

    Args:
        rng: the generator behind message ids and ``sample_rate`` (seed it for
            repeatable ids).
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._id_base = rng.getrandbits(62)
        self._id_seq = 0
        self._topics: dict[str, Topic] = {}
        self._dirty: list[Channel] = []
        self._timers: list[tuple[float, int, Channel]] = []
        self._timer_seq = 0
        self._changes: list[RegistryChange] = []

    # -- topics and channels ----------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, Topic]:
        """The topics, by name, in creation order."""
        return self._topics

    def topic(self, name: str) -> Topic:
        """The topic ``name``, created when missing."""
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = Topic(self, name)
            self._changes.append(RegistryChange(name, None, True))
        return topic

    def channel(self, topic: str, name: str, now: float) -> Channel:
        """The channel ``name`` of ``topic``, both created when missing; the first
        channel of a topic gets the messages the topic kept."""
        t = self.topic(topic)
        channel = t._channels.get(name)
        if channel is None:
            channel = t._channels[name] = Channel(self, t, name)
            self._changes.append(RegistryChange(topic, name, True))
            t._flush_backlog(now)
        return channel

    def find_channel(self, topic: str, name: str) -> Channel:
        """An existing channel.

        Raises:
            LookupError: no such topic or channel.
        """
        t = self._topics.get(topic)
        if t is None:
            raise LookupError(f"topic {topic!r} does not exist")
        channel = t._channels.get(name)
        if channel is None:
            raise LookupError(f"channel {name!r} of topic {topic!r} does not exist")
        return channel

    def find_topic(self, name: str) -> Topic:
        """An existing topic.

        Raises:
            LookupError: no such topic.
        """
        t = self._topics.get(name)
        if t is None:
            raise LookupError(f"topic {name!r} does not exist")
        return t

    def registrations(self) -> list[RegistryChange]:
        """Every topic and channel, as the registrations an nsqlookupd should hold:
        the topics first, then the channels."""
        topics = list(self._topics.values())
        return [RegistryChange(t.name, None, True) for t in topics] + [
            RegistryChange(t.name, c, True) for t in topics for c in t._channels
        ]

    def take_registry_changes(self) -> list[RegistryChange]:
        """Topics and channels created or deleted since the last call, in order."""
        changes, self._changes = self._changes, []
        return changes

    @property
    def has_registry_changes(self) -> bool:
        """Whether :meth:`take_registry_changes` has something to say."""
        return bool(self._changes)

    # -- publishing ---------------------------------------------------------------------

    def new_id(self) -> bytes:
        """The next message id (16 hex digits)."""
        self._id_seq += 1
        return b"%016x" % ((self._id_base + self._id_seq) & 0xFFFFFFFFFFFFFFFF)

    def publish(
        self, topic: str, bodies: Iterable[bytes], now: float, timestamp: int, defer: float = 0.0
    ) -> list[Message]:
        """Put messages on ``topic`` (created when missing).

        Args:
            topic: the topic.
            bodies: the message bodies.
            now: the driver's clock, for deferred messages.
            timestamp: the messages' time stamp (ns since the epoch).
            defer: seconds before the messages may be delivered (DPUB).

        Returns:
            The messages (as the topic's first channel holds them).
        """
        new_id = self.new_id
        msgs = [Message(new_id(), body, timestamp, defer) for body in bodies]
        self.topic(topic)._put(msgs, now)
        return msgs

    # -- consumers ----------------------------------------------------------------------

    def subscribe(
        self, topic: str, channel: str, now: float, *, msg_timeout: float, sample_rate: int = 0
    ) -> Consumer:
        """SUB: a new consumer of ``topic``/``channel`` (created when missing), RDY 0.

        Args:
            msg_timeout: seconds its messages may stay in flight before they time out.
            sample_rate: per cent of the messages it gets (0: all); nsqd drops the others.
        """
        ch = self.channel(topic, channel, now)
        consumer = Consumer(ch, msg_timeout, sample_rate)
        ch.consumers.append(consumer)
        ch._wake()
        return consumer

    def unsubscribe(self, consumer: Consumer) -> None:
        """The consumer's connection closed. Its in-flight messages stay until they
        time out; an ephemeral channel goes with its last consumer."""
        channel = consumer.channel
        if channel.deleted or consumer not in channel.consumers:
            return
        channel.consumers.remove(consumer)
        if not channel.consumers and channel.ephemeral:
            self._remove_channel(channel)

    # -- admin (HTTP) -------------------------------------------------------------------

    def delete_topic(self, name: str) -> list[Consumer]:
        """Delete a topic, its channels and their messages.

        Returns:
            The consumers of its channels (the server closes their connections).

        Raises:
            LookupError: no such topic.
        """
        topic = self.find_topic(name)
        del self._topics[name]
        consumers: list[Consumer] = []
        for channel in topic._channels.values():
            channel.deleted = True
            consumers.extend(channel.consumers)
            self._changes.append(RegistryChange(name, channel.name, False))
        self._changes.append(RegistryChange(name, None, False))
        return consumers

    def delete_channel(self, topic: str, name: str) -> list[Consumer]:
        """Delete a channel and its messages (an ephemeral topic goes with its last channel).

        Returns:
            Its consumers (the server closes their connections).

        Raises:
            LookupError: no such topic or channel.
        """
        channel = self.find_channel(topic, name)
        consumers = list(channel.consumers)
        self._remove_channel(channel)
        return consumers

    def _remove_channel(self, channel: Channel) -> None:
        topic = channel.topic
        channel.deleted = True
        del topic._channels[channel.name]
        self._changes.append(RegistryChange(topic.name, channel.name, False))
        if topic.ephemeral and not topic._channels and self._topics.get(topic.name) is topic:
            del self._topics[topic.name]
            self._changes.append(RegistryChange(topic.name, None, False))

    def empty_topic(self, name: str) -> None:
        """Drop the messages the topic keeps (not its channels').

        Raises:
            LookupError: no such topic.
        """
        self.find_topic(name).backlog.clear()

    def pause_topic(self, name: str, paused: bool, now: float) -> None:
        """Pause a topic (it keeps new messages instead of passing them to its
        channels) or unpause it (what it kept goes to the channels).

        Raises:
            LookupError: no such topic.
        """
        topic = self.find_topic(name)
        topic.paused = paused
        topic._flush_backlog(now)

    # -- delivery -----------------------------------------------------------------------

    def _wake(self, channel: Channel) -> None:
        self._dirty.append(channel)

    @property
    def dispatch_pending(self) -> bool:
        """Whether :meth:`dispatch` has messages to hand out."""
        return bool(self._dirty)

    def dispatch(self, now: float) -> list[tuple[Consumer, list[Message]]]:
        """Deliver what the channels changed since the last call allow.

        Returns:
            Per consumer that got messages, the messages in delivery order (now in
            flight on it, ``attempts`` counted).
        """
        dirty, self._dirty = self._dirty, []
        out: list[tuple[Consumer, list[Message]]] = []
        for channel in dirty:
            channel._dispatch(now, out)
        return out

    # -- timers -------------------------------------------------------------------------

    def _arm(self, due: float, channel: Channel) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (due, self._timer_seq, channel))

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has something to do (None: nothing pending)."""
        timers = self._timers
        while timers:
            due, _, channel = timers[0]
            if channel.timer_at == due and not channel.deleted:
                return due
            heapq.heappop(timers)  # the channel was re-armed earlier, fired or deleted
        return None

    def handle_timer(self, now: float) -> None:
        """Queue the deferred messages due by ``now`` and time out the in-flight ones."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            due, _, channel = heapq.heappop(timers)
            if channel.timer_at == due and not channel.deleted:
                channel._expire(now)

    # -- stop / close -------------------------------------------------------------------

    def flush_for_restart(self) -> None:
        """What nsqd keeps when it stops: every consumer goes; ephemeral channels go;
        the other channels queue their in-flight and deferred messages after the
        queued ones (nsqd writes them to disk and reads them back on start)."""
        for topic in list(self._topics.values()):
            for channel in list(topic._channels.values()):
                if channel.ephemeral:
                    self._remove_channel(channel)
                else:
                    channel._flush_for_restart()
        self._dirty.clear()
        self._timers.clear()

    def clear(self) -> None:
        """Forget every topic."""
        for topic in self._topics.values():
            for channel in topic._channels.values():
                channel.deleted = True
        self._topics.clear()
        self._dirty.clear()
        self._timers.clear()
        self._changes.clear()
