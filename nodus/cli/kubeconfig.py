"""Writing the kubeconfig that ``nodus dev`` hands to kubectl and the kubernetes client."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def write(
    path: Path,
    server: str,
    ca_cert: Path,
    token: str,
    namespace: str = "default",
    cluster: str = "nodus-dev",
    user: str = "nodus-admin",
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": namespace}}],
        "current-context": cluster,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
