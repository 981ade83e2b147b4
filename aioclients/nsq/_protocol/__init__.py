"""Pure NSQ protocol cores: no I/O, no clock, no global randomness.

- ``_frames``: frame decoding, message parsing, command encoding, name checks.
- ``_connection``: one nsqd connection's handshake and steady state.
- ``_rdy``: RDY distribution across connections, and backoff.
- ``_lookup``: nsqlookupd answers, addresses and poll jitter.
"""
