"""The OpenAPI v2 and v3 documents of the ``nodus.dev/v1`` group, generated from the kind registry.

``build_v2``/``build_v3_index``/``build_v3_group`` return the documents as plain JSON values;
``serve_v2``/``serve_v3_index``/``serve_v3_group`` are the Starlette endpoints mounted at
``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/apis/nodus.dev/v1``.
"""

from __future__ import annotations

from nodus.api.openapi.serving import serve_v2, serve_v3_group, serve_v3_index
from nodus.api.openapi.v2 import build_v2
from nodus.api.openapi.v3 import build_v3_group, build_v3_index

__all__ = ["build_v2", "build_v3_group", "build_v3_index", "serve_v2", "serve_v3_group", "serve_v3_index"]
