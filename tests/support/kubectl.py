"""Running the real kubectl against a test cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run(
    binary: Path, kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}
    result = subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result
