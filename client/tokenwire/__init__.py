"""tokenwire: token-in / token-out chat completions over gRPC."""

__version__ = "0.1.0"
