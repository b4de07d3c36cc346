"""Write the committed OpenAPI documents: ``python -m nodus.api.openapi.generate <dir>`` (``make openapi``).

It writes ``<dir>/v2.json`` and ``<dir>/v3/apis/nodus.dev/v1.json`` for the server's kind registry:
pretty-printed JSON (two-space indent, sorted keys, UTF-8, trailing newline), so that a change to a
kind shows as a readable diff. ``tests/api/openapi/test_committed.py`` fails when the files under
``openapi/`` differ from what :func:`render` produces now.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nodus.api.kinds import catalog
from nodus.api.openapi.v2 import build_v2
from nodus.api.openapi.v3 import GROUP_PATH, build_v3_group
from nodus.api.registry import Registry

V2_FILE = Path("v2.json")
V3_GROUP_FILE = Path("v3") / f"{GROUP_PATH}.json"


def pretty(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render(registry: Registry) -> dict[Path, str]:
    """The files to write, by path relative to the output directory."""
    return {V2_FILE: pretty(build_v2(registry)), V3_GROUP_FILE: pretty(build_v3_group(registry))}


def write(directory: Path, registry: Registry) -> list[Path]:
    written = []
    for relative, text in render(registry).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path, help="where to write v2.json and v3/apis/nodus.dev/v1.json")
    arguments = parser.parse_args(argv)
    for path in write(arguments.directory, catalog.registry()):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
