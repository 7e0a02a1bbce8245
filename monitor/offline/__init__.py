"""The offline audit of a fixed pool: ``monitor plan`` and ``monitor estimate``."""
