"""BootstrapToken (``bootstraptokens.nodus.dev``): a one-purpose token a host exchanges for its node credential.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from pydantic import Field

from nodus.apis.v1.base import WireModel


class BootstrapTokenPool(WireModel):
    """BootstrapTokenPool names the Pool a join token adds hosts to."""

    project: str = Field(min_length=1, description="Project is the pool's project.")
    name: str = Field(min_length=1, description="Name is the pool's name.")


class BootstrapTokenSpec(WireModel):
    """BootstrapTokenSpec is a join token: when it ends, which node it may register, its secret's hash, and
    for a pool's join token the Pool its hosts join."""

    description: str | None = Field(None, max_length=256, description="Description says what the token is for.")
    expiration: str | None = Field(
        None, description="Expiration is when the token stops working (default 24h after creation; at most 30d)."
    )
    node_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="NodeName binds the token to one node name; unset, the joining host names its node.",
    )
    pool: BootstrapTokenPool | None = Field(
        None,
        description="Pool makes it a pool's join token: the Node a host registers with it joins this Pool "
        "(POST .../pools/NAME/jointokens creates one).",
    )
    secret: str | None = Field(
        None,
        description="Secret is the token's 16-character secret ([a-z0-9]), given once on create and never stored "
        "(only secretHash is).",
    )
    secret_hash: str | None = Field(
        None, pattern=r"^sha256:[0-9a-f]{64}$", description="SecretHash is the SHA-256 of the secret (set by Nodus)."
    )


class BootstrapTokenStatus(WireModel):
    """BootstrapTokenStatus records how the token was used."""

    last_used_time: str | None = Field(None, description="LastUsedTime is when a host last exchanged the token.")
    nodes: list[str] | None = Field(None, description="Nodes are the nodes that joined with it (the latest 32).")
