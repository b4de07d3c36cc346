"""Project roles and the names only the API server may grant (ADR 0035)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.api.auth import controllers
from nodus.api.auth.authorization import Role, role_in
from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.auth.tokens import TokenAuthenticator, TokenFileError
from nodus.api.errors import APIError


def project(*members: tuple[str, str]) -> dict[str, object]:
    return {"spec": {"members": [{"name": n, "role": r} for n, r in members]}}


@pytest.mark.parametrize(
    ("principal", "members", "role"),
    [
        pytest.param(Principal("alice"), [("alice", "Editor")], Role.EDITOR, id="user"),
        pytest.param(Principal("bob", groups=("ml",)), [("group:ml", "Viewer")], Role.VIEWER, id="group"),
        pytest.param(Principal("group:ml"), [("group:ml", "Owner")], Role.NONE, id="user-named-like-a-group"),
        pytest.param(Principal("ml", groups=()), [("group:ml", "Owner")], Role.NONE, id="user-named-as-the-group"),
        pytest.param(
            Principal("c", groups=("a",)), [("group:a", "Viewer"), ("c", "Owner")], Role.OWNER, id="strongest"
        ),
    ],
)
def test_roles(principal: Principal, members: list[tuple[str, str]], role: Role) -> None:
    assert role_in(project(*members), principal) == role


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('t,system:node:gpu-1,u,"system:nodes"', id="node-user"),
        pytest.param('t,mallory,u,"system:nodes"', id="nodes-group"),
        pytest.param("t,system:bootstrap:abcdef,u", id="bootstrap-user"),
        pytest.param('t,mallory,u,"system:bootstrappers"', id="bootstrappers-group"),
        pytest.param("t,group:admins,u", id="group-prefixed-user"),
    ],
)
def test_token_files_cannot_claim_server_identities(tmp_path: Path, line: str) -> None:
    (tmp_path / "tokens.csv").write_text(line + "\n")
    with pytest.raises(TokenFileError, match=r"tokens\.csv:1"):
        TokenAuthenticator.from_file(tmp_path / "tokens.csv")


CONTROLLER = Principal("nodus-controllers", groups=("system:nodus:controllers",))


@pytest.mark.parametrize(
    ("verb", "resource", "sub", "allowed"),
    [
        ("patch", "jobs", "status", True),
        ("create", "attempts", "", True),
        ("delete", "nodes", "", True),
        ("create", "ledger", "postings", True),
        ("create", "bootstraptokens", "", True),
        ("create", "credits", "", False),
        ("get", "secrets", "values", False),
        ("get", "blobs", "", False),
        ("create", "projects", "", False),
        ("update", "projects", "", False),
        ("patch", "projects", "status", True),
        ("create", "volumes", "", False),
        ("update", "budgets", "", False),
        # The Pipeline controller creates stage Jobs and writes Pipelines' status, never their spec (ADR 0052).
        ("create", "jobs", "", True),
        ("patch", "pipelines", "status", True),
        ("update", "pipelines", "", False),
        # Node heartbeat Leases are created and deleted by the node lifecycle controller (ADR 0055).
        ("create", "leases", "", True),
        ("delete", "leases", "", True),
    ],
)
def test_the_controllers_table(verb: str, resource: str, sub: str, allowed: bool) -> None:
    attrs = Attributes(CONTROLLER, verb, resource, "p", "x", sub)
    if allowed:
        controllers.authorize(attrs)
    else:
        with pytest.raises(APIError, match="not among the controllers' rights"):
            controllers.authorize(attrs)
