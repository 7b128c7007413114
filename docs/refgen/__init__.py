"""The reference-docs generator behind ``docs/generate.py`` (``make docs``).

One module per page (:mod:`refgen.configuration`, :mod:`refgen.api`,
:mod:`refgen.grpc_api`), the command-line tables (:mod:`refgen.command_lines`), and the
shared text helpers (:mod:`refgen.markdown`, :mod:`refgen.values`). The first-party
packages must be importable (``docs/generate.py`` puts the repository root on
``sys.path``, and ``proto/`` for ``api_compat``).
"""
