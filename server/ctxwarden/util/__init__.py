"""Small helpers every layer may import: IDs, the listening address, work on the
event loop in slices. They import nothing else of ctxwarden."""
