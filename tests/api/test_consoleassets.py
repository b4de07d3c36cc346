"""The console's build as the API server reads it: what is served (regular files, by their relative names), what
is not (links out of the directory, dot-files, other versions), the version and the index's asset prefix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodus.api.consoleassets import ConsoleAssets


@pytest.fixture
def build(tmp_path: Path) -> Path:
    root = tmp_path / "console"
    (root / "vendor").mkdir(parents=True)
    (root / "index.html").write_text('<link href="{{ASSETS}}/app.css"><script src="{{ASSETS}}/main.js"></script>')
    (root / "app.css").write_text("body { color: #111; }")
    (root / "main.js").write_text("export {};")
    (root / "vendor" / "uplot.js").write_text("// vendored")
    (root / "icon.svg").write_text("<svg/>")
    (root / "blob.bin").write_bytes(b"\x00\x01")
    (root / ".main.js.swp").write_text("editor state")
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the build")
    (root / "linked.txt").symlink_to(secret)
    (root / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    return root


def test_regular_files_are_served_with_their_types_and_nothing_else(build: Path) -> None:
    assets = ConsoleAssets.load(build)
    v = assets.version
    assert re.fullmatch(r"[0-9a-f]{12}", v)
    found = {name: assets.get(v, name) for name in ("app.css", "main.js", "vendor/uplot.js", "icon.svg", "blob.bin")}
    types = {name: asset.content_type for name, asset in found.items() if asset is not None}
    assert types == {
        "app.css": "text/css; charset=utf-8",
        "main.js": "text/javascript; charset=utf-8",
        "vendor/uplot.js": "text/javascript; charset=utf-8",
        "icon.svg": "image/svg+xml",
        "blob.bin": "application/octet-stream",
    }
    for refused in (
        ".main.js.swp",
        "linked.txt",
        "linked-dir/secret.txt",
        "../secret.txt",
        "vendor/../main.js",
        "./main.js",
        str(build / "main.js"),
        "vendor\\uplot.js",
        "main.js\x00",
        "",
    ):
        assert assets.get(v, refused) is None, refused
    assert assets.get("0" * 12, "main.js") is None


def test_the_index_names_this_builds_assets(build: Path) -> None:
    assets = ConsoleAssets.load(build)
    assert (
        assets.index
        == (
            f'<link href="/console/assets/{assets.version}/app.css">'
            f'<script src="/console/assets/{assets.version}/main.js"></script>'
        ).encode()
    )


def test_any_change_to_the_build_is_a_new_version(build: Path) -> None:
    before = ConsoleAssets.load(build).version
    assert ConsoleAssets.load(build).version == before
    (build / "vendor" / "uplot.js").write_text("// vendored, updated")
    changed = ConsoleAssets.load(build).version
    assert changed != before
    (build / "vendor" / "uplot.js").rename(build / "uplot.js")
    assert ConsoleAssets.load(build).version not in (before, changed)


def test_a_missing_directory_serves_nothing(tmp_path: Path) -> None:
    assets = ConsoleAssets.load(tmp_path / "absent")
    assert assets.index is None and assets.get(assets.version, "index.html") is None
