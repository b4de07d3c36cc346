"""Static bearer tokens from a kube-style token file (``--token-auth-file``).

One line per token: ``token,user,uid,"group1,group2"`` (the groups column is optional), exactly as
kube-apiserver reads it. Blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import csv
import hmac
from pathlib import Path

from nodus.api.auth.principal import AUTHENTICATED_GROUP, Principal, claims_server_identity


class TokenFileError(ValueError):
    pass


class TokenAuthenticator:
    def __init__(self, principals: dict[str, Principal]) -> None:
        self._principals = principals

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        principals: dict[str, Principal] = {}
        with path.open(newline="") as handle:
            for number, row in enumerate(csv.reader(handle), start=1):
                if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                    continue
                if len(row) < 3:
                    raise TokenFileError(f'{path}:{number}: expected token,user,uid[,"group1,group2"]')
                token, user, uid = (cell.strip() for cell in row[:3])
                groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
                if not token or not user:
                    raise TokenFileError(f"{path}:{number}: the token and the user must not be empty")
                refused = claims_server_identity(user, groups)
                if refused is not None:
                    raise TokenFileError(f"{path}:{number}: {refused}")
                principals[token] = Principal(user=user, uid=uid, groups=(*groups, AUTHENTICATED_GROUP))
        return cls(principals)

    def authenticate(self, token: str) -> Principal | None:
        # Compare every token in constant time so timing reveals nothing about valid prefixes.
        found: Principal | None = None
        for candidate, principal in self._principals.items():
            if hmac.compare_digest(candidate.encode(), token.encode()):
                found = principal
        return found
