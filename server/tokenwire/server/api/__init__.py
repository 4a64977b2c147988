"""The gRPC surface of inference: TokenwireService, the Session stream,
EventStreamService (SSE bytes), call metadata."""
