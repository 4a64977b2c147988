"""tests/pure: true unit tests. Plain functions and objects of the server
(turns, admission, sampling rules, continuation resolution, request
conversion, the import graph) called directly: no gRPC server, no engine
process, no network. The deterministic FakeEngine stands in where an
object needs a tokenizer. tests/unit holds the fake-server integration
tests; both run in `make test-unit`, this folder alone in `make test-pure`."""
