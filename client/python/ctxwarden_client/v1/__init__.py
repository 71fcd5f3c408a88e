"""Generated code of the ctxwarden.v1 contract (scripts/gen_protos.sh); do not edit."""
