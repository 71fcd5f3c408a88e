"""ctxwarden: a gRPC sidecar that owns the context of LLM agents."""

__version__ = "0.1.0"
