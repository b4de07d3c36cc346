"""What a request carries into the generic store besides its body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nodus.api.auth.principal import Principal

FieldValidation = Literal["Strict", "Warn", "Ignore"]


@dataclass
class RequestContext:
    principal: Principal
    request_id: str
    field_manager: str
    dry_run: bool = False
    field_validation: FieldValidation = "Warn"
    warnings: list[str] = field(default_factory=list)
    # If-Match of a create: binds a Job to the estimate of a dry run (its ETag).
    if_match: str | None = None
    # Headers the response carries besides Warning (a dry run's ETag).
    response_headers: dict[str, str] = field(default_factory=dict)
    # Projects read while serving this request (authorisation, then admission): read once.
    projects: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
