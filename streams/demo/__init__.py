"""The bundled demo web: a deterministic synthetic web (`webgen`) served on loopback
(`server`, `serving`, `protocol`; nginx where installed, `nginx`), started as a child
process by the demo command, the tests and the benchmarks (`process`).

Imports the standard library and itself only: the demo web knows nothing of the
crawler it is crawled by.
"""
