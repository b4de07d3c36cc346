"""Secret (``secrets.nodus.dev``): versioned, sealed values; the fields a client sends and the status it reads.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from pydantic import Field

from nodus.apis.v1.base import WireModel

MAX_VERSIONS = 32


class SecretVersion(WireModel):
    """SecretVersion is one kept version of the values: its number, its keys and when it was made."""

    version: int = Field(ge=1, description="Version is the number of this version, from 1.")
    keys: list[str] = Field(description="Keys are the names of the values in this version, sorted.")
    created_time: str | None = Field(None, description="CreatedTime is when this version was written.")


class SecretStatus(WireModel):
    """SecretStatus describes the values without revealing them."""

    version: int | None = Field(None, description="Version is the current version: what a new Job pins.")
    keys: list[str] | None = Field(None, description="Keys are the names of the current version's values, sorted.")
    versions: list[SecretVersion] | None = Field(
        None, description=f"Versions are the kept versions, oldest first (at most {MAX_VERSIONS})."
    )


class SecretFields(WireModel):
    """The top-level fields of a Secret besides metadata and status, as clients write them."""

    type: str | None = Field(
        None, description="Type is a hint for consumers, such as Opaque (the default); it is immutable."
    )
    data: dict[str, str] | None = Field(
        None,
        description="Data holds the values, base64-encoded, by key (keys match [-._a-zA-Z0-9]+). Write-only: "
        "responses never include it; a write without data or stringData keeps the current values.",
    )
    string_data: dict[str, str] | None = Field(
        None,
        description="StringData holds values as plain text, merged over data. Write-only, like data.",
    )
