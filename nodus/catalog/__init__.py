"""The price book: what capacity Nodus can offer and what it costs (``pricebook``).

This package knows nothing of the API server: ``nodus.api`` loads a price book through it and writes
the Offerings it describes, so ``nodus.catalog`` imports only ``nodus.apimachinery`` (import-linter).
"""
