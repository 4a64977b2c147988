"""Generated tokenwire.v1 protobuf and gRPC code (make proto)."""
