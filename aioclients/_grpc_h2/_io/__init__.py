"""The asyncio driver of the HTTP/2 gRPC transport."""
