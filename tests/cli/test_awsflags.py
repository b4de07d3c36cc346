"""``nodus controllers --provider aws|none``: the flags build the provider (or none), and a missing or malformed
flag exits with a message naming it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nodus.cli import kubeconfig, processes
from nodus.cloud.aws import AwsProvider

PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    processes.add_controller_flags(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "ca.crt").write_text(PEM)
    path = tmp_path / "kubeconfig"
    kubeconfig.write(path, "https://10.0.0.5:6443", tmp_path / "ca.crt", "token")
    return path


def test_aws_flags_make_the_provider(config: Path) -> None:
    args = parse(
        *(
            "--provider",
            "aws",
            "--aws-cluster",
            "prod",
            "--aws-image",
            "us-east-1=ami-1",
            "--aws-image",
            "eu-west-1=ami-2",
        ),
        *("--aws-security-group", "us-east-1=sg-1", "--aws-security-group", "us-east-1=sg-2"),
        *("--aws-capacity-for", "cpu-8c-us=3", "--aws-agent-flag=--runtime", "--aws-agent-flag=podman"),
        *("--aws-sweep-interval", "30s"),
    )
    settings = processes.controller_settings(args, config)
    assert settings.provider is not None
    provider = settings.provider()
    assert isinstance(provider, AwsProvider)
    aws = provider.config
    assert (aws.cluster, aws.images) == ("prod", {"us-east-1": "ami-1", "eu-west-1": "ami-2"})
    assert aws.security_groups == {"us-east-1": ("sg-1", "sg-2")}
    assert aws.capacity_overrides == {"cpu-8c-us": 3}
    assert aws.bootstrap.server == "https://10.0.0.5:6443", "the hosts dial the kubeconfig's server by default"
    assert aws.bootstrap.ca_pem == PEM
    assert aws.bootstrap.agent_flags == ("--runtime", "podman")
    assert settings.sweep_interval.total_seconds() == 30


def test_none_runs_no_provider(config: Path) -> None:
    assert processes.controller_settings(parse("--provider", "none"), config).provider is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(("--aws-image", "us-east-1=ami-1"), "--aws-cluster", id="no-cluster"),
        pytest.param(("--aws-cluster", "c"), "--aws-image REGION=AMI", id="no-image"),
        pytest.param(("--aws-cluster", "c", "--aws-image", "ami-1"), "--aws-image wants KEY=VALUE", id="bad-image"),
        pytest.param(
            ("--aws-cluster", "c", "--aws-image", "r=a", "--aws-capacity-for", "x=many"),
            "--aws-capacity-for wants x=HOSTS",
            id="bad-capacity",
        ),
    ],
)
def test_a_wrong_aws_flag_is_named(config: Path, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        processes.controller_settings(parse("--provider", "aws", *argv), config)


def test_a_ca_that_is_not_pem_is_refused(config: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.crt").write_text("hello")
    argv = ("--aws-cluster", "c", "--aws-image", "r=a", "--aws-certificate-authority", str(tmp_path / "bad.crt"))
    with pytest.raises(SystemExit, match="--aws-certificate-authority: the CA file must hold PEM"):
        processes.controller_settings(parse("--provider", "aws", *argv), config)
