"""Performance measurements of the serving layer (docs/bench.md)."""
