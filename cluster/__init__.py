"""lograft's node process, configuration, clients and command line.

This package is imported by ``replica`` and ``controller`` for the shared error types and the
wire stubs, so its ``__init__`` imports nothing.
"""
