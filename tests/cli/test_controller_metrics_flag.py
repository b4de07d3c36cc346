"""``nodus controllers --metrics-address HOST:PORT``: where the controllers serve their metrics; a malformed address
stops the command before anything starts, naming the flag and the form it wants."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.cli import main, processes


def settings(tmp_path: Path, *argv: str) -> processes.ControllerSettings:
    args = main.parser().parse_args(["controllers", "--provider", "none", *argv])
    return processes.controller_settings(args, tmp_path / "kubeconfig")


def test_the_address_is_kept_and_off_by_default(tmp_path: Path) -> None:
    assert settings(tmp_path).metrics_address is None
    assert settings(tmp_path, "--metrics-address", "127.0.0.1:9464").metrics_address == "127.0.0.1:9464"
    assert settings(tmp_path, "--metrics-address", "[::1]:9464").metrics_address == "[::1]:9464"


@pytest.mark.parametrize("address", ["9464", "localhost", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000", ":9464"])
def test_a_malformed_address_is_refused_with_the_form_it_wants(
    tmp_path: Path, address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        settings(tmp_path, "--metrics-address", address)
    error = capsys.readouterr().err
    assert "--metrics-address" in error and "HOST:PORT" in error
