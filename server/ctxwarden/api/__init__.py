"""gRPC boundary: servicers, proto <-> domain conversion, error mapping."""
