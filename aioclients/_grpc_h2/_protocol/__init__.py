"""The pure core of the HTTP/2 gRPC transport: no I/O, no clock, no global randomness."""
