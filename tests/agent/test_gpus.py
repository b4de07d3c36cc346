"""GPUs through CDI: discovery, spec reading, and what a real podman container is given for the names we compute.

No GPU here: the CDI tests use a spec of their own in /var/run/cdi (the only dynamic directory podman 4.3 reads)
whose devices are character nodes made with mknod under a tmp dir, with NVIDIA's major (195) and the GPU's number as
minor, each also mounting a file and setting an env var. The kind is ``nodus.test/gpu-<random>`` so that parallel
runs never declare the same fully-qualified name twice (podman refuses both declarations of a conflicting name).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.agent import gpus
from nodus.agent.gpus import CdiDevices, CdiError, Gpu

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

CDI_DYNAMIC_DIR = Path("/var/run/cdi")
NVIDIA_MAJOR = 195
# Ordinal of the tests' GPUs; their device nodes are /dev/nvidia<N>, major 195, minor N, as the driver's are.
TEST_GPUS = (0, 1)


def _image() -> str:
    from nodus.cli import devimages

    return devimages.import_into_podman(
        devimages.base_tarball(Path(__file__).resolve().parents[2] / ".cache" / "images"),
        "localhost/nodus/base:" + devimages.tag(),
    )


def _podman_run(
    image: str, devices: list[str], script: str, env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
) -> str:
    """Runs ``sh -c script`` in a fresh container given these CDI devices; its stdout (fails the test on non-zero)."""
    command = ["podman", "--cgroup-manager=cgroupfs", "run", "--rm", "--runtime=runc", "--network=none"]
    command += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
    command += [f"--device={device}" for device in devices]
    command += [f"--env={key}={value}" for key, value in (env or {}).items()]
    command += extra
    done = subprocess.run(
        [*command, image, "sh", "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"podman run failed ({done.returncode}): {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    return _image()


@pytest.fixture(scope="module")
def test_spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A CDI spec in /var/run/cdi declaring TEST_GPUS as devices "0" and "1"; removed after the module."""
    host = tmp_path_factory.mktemp("cdi")
    devices = []
    for number in TEST_GPUS:
        node = host / f"nvidia{number}"
        os.mknod(node, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, number))
        marker = host / f"marker{number}"
        marker.write_text(f"test gpu {number}\n")
        devices.append(
            {
                "name": str(number),
                "containerEdits": {
                    "deviceNodes": [{"path": f"/dev/nvidia{number}", "hostPath": str(node)}],
                    "mounts": [
                        {
                            "hostPath": str(marker),
                            "containerPath": f"/etc/nodus-test-gpu-{number}",
                            "options": ["ro", "bind"],
                        }
                    ],
                    "env": [f"NODUS_TEST_GPU_{number}=present"],
                },
            }
        )
    kind = f"nodus.test/gpu-{uuid.uuid4().hex[:8]}"
    CDI_DYNAMIC_DIR.mkdir(parents=True, exist_ok=True)
    path = CDI_DYNAMIC_DIR / f"nodus-test-{uuid.uuid4().hex}.json"
    path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": kind, "devices": devices}))
    try:
        yield path
    finally:
        path.unlink()


def test_a_container_has_its_own_gpu_and_cannot_open_another(image: str, test_spec: Path) -> None:
    names = CdiDevices.from_spec_file(test_spec).names_for([1])
    # The tenant's program is root in its container; given CAP_MKNOD too (podman's default drops it), making the other
    # GPU's node must still not let it open that GPU (the device cgroup allows only what was injected). EPERM is the
    # cgroup's refusal; ENXIO means the open reached the (absent) driver, i.e. was allowed.
    script = r"""
        ls /dev | grep '^nvidia' | tr '\n' ' '; echo
        stat -c %t:%T /dev/nvidia1
        cat /etc/nodus-test-gpu-*
        env | grep '^NODUS_TEST_GPU' | sort
        mknod /dev/stolen0 c 195 0
        python3 -c '
import errno, os
for path in ("/dev/nvidia1", "/dev/stolen0"):
    try:
        os.close(os.open(path, os.O_RDONLY))
        print(path, "opened")
    except OSError as error:
        print(path, errno.errorcode[error.errno])
'
    """
    lines = _podman_run(image, names, script, extra=("--cap-add=MKNOD",)).splitlines()
    assert lines[0].split() == ["nvidia1"]
    assert lines[1] == "c3:1"  # stat prints hex: 195 is c3
    assert lines[2] == "test gpu 1"
    assert lines[3] == "NODUS_TEST_GPU_1=present"
    assert lines[4].split()[1] in ("ENXIO", "opened"), "the assigned GPU's node must be openable"
    assert lines[5] == f"/dev/stolen0 {errno.errorcode[errno.EPERM]}", "another GPU must be refused by the cgroup"


def test_two_gpus_are_both_given_and_cuda_numbers_them_from_zero(image: str, test_spec: Path) -> None:
    indexes = [1, 0]
    names = CdiDevices.from_spec_file(test_spec).names_for(indexes)
    env = gpus.visible_devices_env(indexes)
    script = r"""
        ls /dev | grep '^nvidia' | sort | tr '\n' ' '; echo
        for n in /dev/nvidia*; do stat -c %t:%T "$n"; done | sort | tr '\n' ' '; echo
        cat /etc/nodus-test-gpu-* | tr '\n' ' '; echo
        echo "$CUDA_VISIBLE_DEVICES/$NVIDIA_VISIBLE_DEVICES/$CUDA_DEVICE_ORDER"
    """
    lines = _podman_run(image, names, script, env).splitlines()
    assert lines[0].split() == ["nvidia0", "nvidia1"]
    assert lines[1].split() == ["c3:0", "c3:1"]
    assert lines[2].split(" ", 5)[:5] == ["test", "gpu", "0", "test", "gpu"]
    cuda, nvidia, order = lines[3].split("/")
    # What the program is told agrees with what it has: one CUDA ordinal per injected node, from 0.
    assert cuda.split(",") == [str(ordinal) for ordinal in range(len(lines[0].split()))]
    assert nvidia == "0,1" and order == "PCI_BUS_ID"


def test_no_gpus_means_no_device_nodes_and_cuda_sees_none(image: str, test_spec: Path) -> None:
    assert CdiDevices.from_spec_file(test_spec).names_for([]) == []
    out = _podman_run(
        image, [], 'ls /dev | grep -c "^nvidia" || true; echo "[$CUDA_VISIBLE_DEVICES]"', gpus.visible_devices_env([])
    )
    assert out.split() == ["0", "[]"]


def test_visible_devices_env_renumbers_and_refuses_nonsense() -> None:
    assert gpus.visible_devices_env([5, 2]) == {
        "NVIDIA_VISIBLE_DEVICES": "2,5",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert gpus.visible_devices_env([]) == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
    for bad in ([1, 1], [-1]):
        with pytest.raises(ValueError, match="distinct and non-negative"):
            gpus.visible_devices_env(bad)


def _executable(path: Path, script: str) -> str:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_discover_finds_nothing_here_without_raising() -> None:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("NVML is importable here: this machine may have GPUs")
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("nvidia-smi is on PATH: this machine may have GPUs")
    assert gpus.discover() == []
    assert gpus.discover(None) == []
    assert gpus.discover("/nonexistent/nvidia-smi", nvml=False) == []


def test_discover_parses_nvidia_smi(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The fake checks it was asked the query the parser expects; asked anything else, it fails and finds nothing.
    smi = _executable(
        tmp_path / "nvidia-smi",
        """[ "$*" = "--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits" ] || exit 2
cat <<'EOF'
0, GPU-8a1c0d8e-0000-1111-2222-333344445555, NVIDIA A100-SXM4-80GB, 81920
1, GPU-9b2d1e9f-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, Rev, B, 81559

this line is not a GPU
2, GPU-x, NVIDIA T4, [N/A]
EOF
""",
    )
    found = gpus.discover(smi, nvml=False)
    assert found == [
        Gpu(0, "GPU-8a1c0d8e-0000-1111-2222-333344445555", "NVIDIA A100-SXM4-80GB", 81920),
        Gpu(1, "GPU-9b2d1e9f-0000-1111-2222-333344445555", "NVIDIA H100 80GB HBM3, Rev, B", 81559),
    ]
    assert caplog.text.count("not a GPU, skipped") == 2


def test_discover_without_a_driver_finds_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    smi = _executable(tmp_path / "nvidia-smi", f"cat <<'EOF'\n{message}\nEOF\nexit 9\n")
    with caplog.at_level("INFO", logger="nodus.agent.gpus"):
        assert gpus.discover(smi, nvml=False) == []
    assert "exited 9" in caplog.text and message in caplog.text


def _spec(path: Path, kind: str, names: list[str]) -> Path:
    devices = [{"name": name, "containerEdits": {"deviceNodes": [{"path": f"/dev/x{name}"}]}} for name in names]
    path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": kind, "devices": devices}))
    return path


def test_names_for_refuses_an_index_the_spec_lacks(tmp_path: Path) -> None:
    devices = CdiDevices.from_spec_file(_spec(tmp_path / "a.json", "nvidia.com/gpu", ["0", "1", "all"]))
    assert devices.names_for([1, 0]) == ["nvidia.com/gpu=1", "nvidia.com/gpu=0"]
    with pytest.raises(CdiError, match=r"GPU 2 has no CDI device of kind nvidia.com/gpu \(declared: 0, 1, all"):
        devices.names_for([0, 2])
    with pytest.raises(CdiError, match="more than once"):
        devices.names_for([1, 1])
    with pytest.raises(CdiError, match="negative"):
        devices.names_for([-1])


def test_names_for_finds_gpus_named_by_uuid(tmp_path: Path) -> None:
    host = [Gpu(0, "GPU-aaaa", "T4", 15360), Gpu(1, "GPU-bbbb", "T4", 15360)]
    spec = _spec(tmp_path / "uuids.yaml", "nvidia.com/gpu", ["GPU-bbbb", "GPU-aaaa"])
    devices = CdiDevices.from_spec_file(spec, host)
    assert devices.names_for([1]) == ["nvidia.com/gpu=GPU-bbbb"]
    with pytest.raises(CdiError, match="GPU 2"):
        devices.names_for([2])


@pytest.mark.parametrize(
    ("name", "content", "fault"),
    [
        ("broken.yaml", "cdiVersion: 0.5.0\ndevices: [unclosed\n", "not valid YAML"),
        ("broken.json", '{"cdiVersion": "0.5.0", ', "not valid JSON"),
        ("binary.yaml", "\udcff\udcfe", "not valid YAML"),
        ("list.yaml", "- nvidia.com/gpu\n", "is list"),
        ("noversion.json", '{"kind": "nvidia.com/gpu", "devices": []}', "cdiVersion None is missing"),
        ("version.json", '{"cdiVersion": "0.5.0;rm", "kind": "a.b/gpu", "devices": []}', "not <major>.<minor>"),
        ("newer.json", '{"cdiVersion": "0.6.0", "kind": "a.b/gpu", "devices": []}', "newer than 0.5.0"),
        ("kind.json", '{"cdiVersion": "0.5.0", "kind": "--privileged", "devices": []}', "kind '--privileged'"),
        (
            "argv.json",
            '{"cdiVersion": "0.5.0", "kind": "a.b/gpu", "devices": [{"name": "0,a.b/x=1"}]}',
            "no valid name",
        ),
        ("dots.json", '{"cdiVersion": "0.5.0", "kind": "a.b/gpu", "devices": [{"name": "../0"}]}', "no valid name"),
        ("python-tag.yaml", "a: &a [x, x]\nb: &b [*a, *a]\nkind: !!python/object:os.system ls\n", "not valid YAML"),
    ],
)
def test_a_hostile_spec_is_refused_naming_the_file(tmp_path: Path, name: str, content: str, fault: str) -> None:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(CdiError) as raised:
        CdiDevices.from_spec_file(path)
    assert str(raised.value).startswith(f"{path}: ") and fault in str(raised.value)


def test_an_oversized_spec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(gpus._MAX_SPEC_BYTES + 1)
    with pytest.raises(CdiError, match="larger than"):
        CdiDevices.from_spec_file(path)


HOST = [Gpu(0, "GPU-aaaa", "T4", 15360), Gpu(1, "GPU-bbbb", "T4", 15360)]


def test_for_host_reads_the_existing_spec_and_skips_broken_ones(tmp_path: Path) -> None:
    (etc := tmp_path / "etc").mkdir()
    (run := tmp_path / "run").mkdir()
    _spec(etc / "nvidia.json", "nvidia.com/gpu", ["0"])
    _spec(run / "nvidia.yaml", "nvidia.com/gpu", ["1"])
    _spec(run / "other.json", "other.com/fpga", ["2"])
    (run / "broken.yaml").write_text("devices: [")
    # A spec podman 4.3 would ignore (too new) must not lend its names either.
    (run / "newer.json").write_text(
        json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "2"}]})
    )
    devices = CdiDevices.for_host(HOST, spec_dirs=[etc, run, tmp_path / "absent"], nvidia_ctk="/nonexistent")
    assert devices.names_for([0, 1]) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    with pytest.raises(CdiError, match="GPU 2"):
        devices.names_for([2])


def test_for_host_without_gpus_has_no_devices(tmp_path: Path) -> None:
    devices = CdiDevices.for_host([], spec_dirs=[tmp_path], nvidia_ctk="/nonexistent")
    assert devices.devices == frozenset() and devices.names_for([]) == []
    with pytest.raises(CdiError, match="GPU 0"):
        devices.names_for([0])


def test_for_host_generates_a_spec_with_nvidia_ctk_once(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    spec = json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0"}, {"name": "1"}]})
    ctk = _executable(
        tmp_path / "nvidia-ctk",
        f"""echo "$*" >> {calls}
[ "$1 $2" = "cdi generate" ] || exit 2
out="${{3#--output=}}"
echo '{spec}' > "$out"
""",
    )
    generated = tmp_path / "run" / "nvidia.yaml"
    devices = CdiDevices.for_host(HOST, spec_dirs=[tmp_path / "etc"], nvidia_ctk=ctk, generated=generated)
    assert devices.names_for([1]) == ["nvidia.com/gpu=1"]
    assert calls.read_text().splitlines() == [f"cdi generate --output={generated}"]
    # The next start finds the generated spec in the dynamic directory and does not run nvidia-ctk again.
    again = CdiDevices.for_host(HOST, spec_dirs=[generated.parent], nvidia_ctk=ctk, generated=generated)
    assert again.names_for([0]) == ["nvidia.com/gpu=0"]
    assert len(calls.read_text().splitlines()) == 1


def test_for_host_with_gpus_but_no_spec_and_no_toolkit_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CdiError, match="nvidia-ctk is not on PATH"):
        CdiDevices.for_host(HOST, spec_dirs=[tmp_path])
    failing = _executable(tmp_path / "nvidia-ctk", "echo 'could not load NVML' >&2\nexit 1\n")
    with pytest.raises(CdiError, match="exited 1: could not load NVML"):
        CdiDevices.for_host(HOST, spec_dirs=[tmp_path / "none"], nvidia_ctk=failing, generated=tmp_path / "g.yaml")


def test_nvidia_smi_in_a_container_lists_exactly_the_assigned_gpu(image: str) -> None:
    host = gpus.discover()
    if not host:
        pytest.skip("no GPU on this machine: discover() found none, so there is no real CDI device to give")
    devices = CdiDevices.for_host(host)
    chosen = host[-1]
    out = _podman_run(
        image, devices.names_for([chosen.index]), "nvidia-smi -L", gpus.visible_devices_env([chosen.index])
    )
    assert out.strip().splitlines() == [f"GPU 0: {chosen.name} (UUID: {chosen.uuid})"]
