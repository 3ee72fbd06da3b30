"""The bundled demo web: a deterministic synthetic web served on loopback."""
