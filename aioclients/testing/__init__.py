"""Test servers for aioclients: a real nats-server, and (as they land) the
protocol-faithful NSQ and Liftbridge emulators, plus a pytest plugin."""

from aioclients.testing.liftbridge import LiftbridgeCluster
from aioclients.testing.nats_server import NatsServer, find_nats_server_binary
from aioclients.testing.nsqd import NsqdEmulator
from aioclients.testing.nsqlookupd import NsqlookupdEmulator

__all__ = (
    "LiftbridgeCluster",
    "NatsServer",
    "NsqdEmulator",
    "NsqlookupdEmulator",
    "find_nats_server_binary",
)
