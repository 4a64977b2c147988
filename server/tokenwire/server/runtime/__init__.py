"""Putting it together: app lifecycle (engine, gRPC server, health,
shutdown), the `tokenwire serve` CLI, several serving processes, building the
demo model."""
