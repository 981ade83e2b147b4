"""gRPC (``grpc.aio``) side of the Liftbridge client: channels, TLS, error mapping."""
