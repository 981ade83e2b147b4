"""Test servers for aioclients: a real nats-server, the protocol-faithful NSQ and
Liftbridge emulators, a fault-injecting TCP proxy, and a pytest plugin."""

from aioclients.testing.fault_proxy import FaultProxy, FaultProxyStatistics
from aioclients.testing.liftbridge import LiftbridgeCluster
from aioclients.testing.nats_server import NatsServer, find_nats_server_binary
from aioclients.testing.nsqd import NsqdEmulator
from aioclients.testing.nsqlookupd import NsqlookupdEmulator

__all__ = (
    "FaultProxy",
    "FaultProxyStatistics",
    "LiftbridgeCluster",
    "NatsServer",
    "NsqdEmulator",
    "NsqlookupdEmulator",
    "find_nats_server_binary",
)
