"""The kinds of ``nodus.dev/v1``: one package or module per kind, each a declaration plus a strategy."""
