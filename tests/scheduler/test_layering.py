"""The scheduler stays pure: it imports only the standard library, ``nodus.apimachinery``, the wire vocabulary
(``nodus.apis``: phases, label keys, models; no I/O) and itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import nodus.scheduler

SOURCES = sorted(Path(nodus.scheduler.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("source", [pytest.param(path, id=path.name) for path in SOURCES])
def test_imports_only_the_standard_library_apimachinery_and_apis(source: Path) -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    allowed = ("nodus.apimachinery", "nodus.apis", "nodus.scheduler")
    foreign = {
        name for name in imported if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith(allowed)
    }
    assert not foreign
