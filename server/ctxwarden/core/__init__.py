"""Pure domain logic: no gRPC, no SQL, no I/O."""
