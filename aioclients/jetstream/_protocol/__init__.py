"""Pure JetStream protocol helpers: no I/O, no clock, no randomness.

- ``_names``: validation of stream, consumer, subject and priority-group names.
- ``_config``: StreamConfig/ConsumerConfig conversion (seconds <-> nanoseconds)
  and ADR-42 validation.
- ``_headers``: NATS header block encoding/decoding and publish expectations.
- ``_direct``: ADR-31 Direct Get requests and reply classification.
- ``_time``: server timestamp parsing.
"""
