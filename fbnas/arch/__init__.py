"""Architectures: the candidate ops, search spaces, model definitions and export.

What a network is, independent of how it is timed or trained: the op registry
(``ops.PRIMITIVES``), the search-space files and their validation, architecture definitions
(JSON data, never code) and the plain network built from one, and its export to ONNX or
torch.export. Everything else in fbnas builds on this package; it imports nothing from the
others.
"""
