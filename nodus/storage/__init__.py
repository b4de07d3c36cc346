"""The only package that touches PostgreSQL (SQLAlchemy 2 async over asyncpg, Alembic).

Everything above it sees objects as JSON documents keyed by (kind, namespace, name), a single global
resourceVersion, and a watch stream; see ``objects``, ``committing`` and ``watchcache``.
"""
