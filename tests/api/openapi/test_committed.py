"""The OpenAPI documents committed under ``openapi/`` are what the server publishes now.

They are generated (``make openapi``) and reviewed like code: a change to a kind's models shows as
a diff of these files, and this test fails until they are regenerated.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from nodus.api.kinds import catalog
from nodus.api.openapi import build_v2, build_v3_group
from nodus.api.openapi.generate import V2_FILE, V3_GROUP_FILE, pretty

COMMITTED = Path(__file__).resolve().parents[3] / "openapi"
BUILDERS = {V2_FILE: build_v2, V3_GROUP_FILE: build_v3_group}


@pytest.mark.parametrize("relative", list(BUILDERS), ids=str)
def test_committed_document_is_current(relative: Path) -> None:
    path = COMMITTED / relative
    assert path.is_file(), f"openapi/{relative} is missing: run `make openapi` and commit it"
    committed = path.read_text(encoding="utf-8")
    current = pretty(BUILDERS[relative](catalog.registry()))
    if committed != current:
        diff = difflib.unified_diff(committed.splitlines(), current.splitlines(), "committed", "current", lineterm="")
        excerpt = "\n".join(list(diff)[:60])
        pytest.fail(f"openapi/{relative} is stale: run `make openapi` and commit the result.\n{excerpt}")
    assert json.loads(committed) == BUILDERS[relative](catalog.registry())
