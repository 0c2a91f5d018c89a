"""The shipped units, checked offline (no systemd as PID 1 here): ``systemd-analyze verify`` and
``security --offline=true`` on the installed files, the settings the mount lifecycle depends on,
and what systemd's fstab generator makes of ``fuse.zarrfs`` lines."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from systemd_helpers import (
    INSTALLED_ZARRFS,
    REPO,
    SERVICE,
    UNITS,
    VENV_ZARRFS,
    command_line,
    require,
    setting,
    unit_settings,
)

pytestmark = pytest.mark.timeout(120)

#: exposure score systemd-analyze must not exceed ("OK" ends at 4.9; see docs/systemd.md)
MAX_EXPOSURE = 4.5
GENERATOR = Path("/lib/systemd/system-generators/systemd-fstab-generator")

#: settings that give a service a mount namespace of its own (systemd.exec(5)): a FUSE mount
#: made inside it would never appear on the host, so the service must set none of them
MOUNT_NAMESPACE_SETTINGS = (
    "RootDirectory", "RootImage", "MountAPIVFS", "ProtectProc", "ProcSubset", "BindPaths",
    "BindReadOnlyPaths", "MountImages", "ExtensionImages", "ExtensionDirectories",
    "ProtectSystem", "ProtectHome", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
    "ExecPaths", "NoExecPaths", "TemporaryFileSystem", "PrivateTmp", "PrivateDevices",
    "PrivateNetwork", "NetworkNamespacePath", "PrivateIPC", "IPCNamespacePath", "PrivateUsers",
    "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
    "PrivateMounts", "MountFlags", "LogNamespace", "DynamicUser",
)  # fmt: skip


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """scripts/install_systemd.sh into a staging root, ExecStart= pointing at this checkout."""
    require("systemd-analyze")
    root = tmp_path / "root"
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_systemd.sh"), "--root", str(root),
         "--zarrfs", VENV_ZARRFS],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return root / "etc" / "systemd" / "system"


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args, "--man=no"], capture_output=True, text=True, timeout=60
    )


def test_install_substitutes_the_zarrfs_path_and_nothing_else(installed: Path) -> None:
    service = installed / "zarrfs@.service"
    assert service.read_text() == SERVICE.read_text().replace(INSTALLED_ZARRFS, VENV_ZARRFS)
    (start,) = setting(service, "ExecStart")
    assert command_line(start, {})[0] == VENV_ZARRFS
    example = installed.parents[1] / "zarrfs" / "zarrfs.conf.example"
    assert example.read_text() == (UNITS / "zarrfs.conf.example").read_text()


def test_service_verifies_cleanly(installed: Path) -> None:
    result = analyze("verify", str(installed / "zarrfs@ocean.service"))
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result.stderr


def test_example_mount_and_automount_units_verify_cleanly(tmp_path: Path) -> None:
    require("systemd-analyze")
    for name in ("mnt-zarr.mount", "mnt-zarr.automount"):
        shutil.copy(UNITS / name, tmp_path / name)
    result = analyze(
        "verify", str(tmp_path / "mnt-zarr.mount"), str(tmp_path / "mnt-zarr.automount")
    )
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result.stderr
    assert setting(UNITS / "mnt-zarr.mount", "Type") == ["fuse.zarrfs"]
    assert "_netdev" in setting(UNITS / "mnt-zarr.mount", "Options")[0].split(",")


def test_security_exposure_is_ok(installed: Path) -> None:
    result = analyze("security", "--offline=true", str(installed / "zarrfs@ocean.service"))
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for zarrfs@ocean\.service: ([\d.]+)", result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout
    passed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("✓")}
    for check in (
        "NoNewPrivileges=", "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
        "CapabilityBoundingSet=~CAP_SYS_MODULE", "SystemCallFilter=~@privileged",
        "SystemCallArchitectures=", "MemoryDenyWriteExecute=", "RestrictNamespaces=~user",
        "RestrictSUIDSGID=", "LockPersonality=", "NotifyAccess=",
    ):  # fmt: skip
        assert check in passed, f"{check} not satisfied:\n{result.stdout}"


def test_no_setting_gives_the_service_its_own_mount_namespace() -> None:
    for section, key, value in unit_settings(SERVICE):
        if key in MOUNT_NAMESPACE_SETTINGS:
            assert value.lower() in ("", "no", "false"), f"[{section}] {key}={value}"


def test_service_lifecycle_settings() -> None:
    expected = {
        "Type": ["notify"],  # active only once the daemon says READY=1 (the mount answers)
        "NotifyAccess": ["main"],
        "KillMode": ["mixed"],  # SIGTERM to the daemon alone: it unmounts and flushes
        "Restart": ["on-failure"],
        "RestartPreventExitStatus": ["2"],  # usage errors do not heal by retrying
        "CapabilityBoundingSet": ["CAP_SYS_ADMIN"],
        "DevicePolicy": ["closed"],
        "DeviceAllow": ["/dev/fuse rw"],
        "EnvironmentFile": ["/etc/zarrfs/%i.conf"],
    }
    for key, values in expected.items():
        assert setting(SERVICE, key) == values, key
    (start,) = setting(SERVICE, "ExecStart")
    argv = command_line(start, {"STORE": "s", "MOUNTPOINT": "/m", "OPTIONS": ""})
    assert argv == [VENV_ZARRFS, "mount", "--systemd", "s", "/m", "-o", ""]


OCEAN_OPTIONS = "ro,allow_other,_netdev,nofail,log_level=info"
W_X_OPTIONS = "rw,_netdev,noauto,x-systemd.mount-timeout=3min"
OBS_OPTIONS = (
    "ro,_netdev,x-systemd.automount,x-systemd.idle-timeout=10min,endpoint=http://minio:9000"
)
FSTAB = "\n".join(
    [
        "# a local store, mounted at boot; boot goes on without it",
        f"/srv/zarr/ocean.zarr /mnt/ocean fuse.zarrfs {OCEAN_OPTIONS} 0 0",
        "# an object store, mounted on first access, unmounted when idle",
        f"s3://bucket/obs.zarr /mnt/obs fuse.zarrfs {OBS_OPTIONS} 0 0",
        "# only by hand, with a longer mount timeout; spaces are escaped as \\040",
        rf"/srv/zarr/w\040x.zarr /srv/w\040x fuse.zarrfs {W_X_OPTIONS} 0 0",
    ]
)


def generate(tmp_path: Path) -> Path:
    require("systemd-analyze")
    if not GENERATOR.exists():
        pytest.skip(f"{GENERATOR} is missing (apt-get install systemd)")
    fstab = tmp_path / "fstab"
    fstab.write_text(FSTAB)
    out = tmp_path / "generated"
    out.mkdir()
    result = subprocess.run(
        [str(GENERATOR), str(out), str(out), str(out)],
        env={"SYSTEMD_FSTAB": str(fstab), "SYSTEMD_LOG_LEVEL": "warning", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def mount_section(path: Path) -> dict[str, str]:
    return {key: value for section, key, value in unit_settings(path) if section == "Mount"}


def test_fstab_generator_makes_remote_fs_mount_units(tmp_path: Path) -> None:
    out = generate(tmp_path)
    assert mount_section(out / "mnt-ocean.mount") == {
        "What": "/srv/zarr/ocean.zarr",
        "Where": "/mnt/ocean",
        "Type": "fuse.zarrfs",
        "Options": OCEAN_OPTIONS,
    }
    assert mount_section(out / "mnt-obs.mount") == {
        "What": "s3://bucket/obs.zarr",
        "Where": "/mnt/obs",
        "Type": "fuse.zarrfs",
        "Options": OBS_OPTIONS,
    }
    assert mount_section(out / r"srv-w\x20x.mount") == {
        "What": "/srv/zarr/w x.zarr",
        "Where": "/srv/w x",
        "Type": "fuse.zarrfs",
        "TimeoutSec": "3min",
        "Options": W_X_OPTIONS,
    }
    automount = {k: v for s, k, v in unit_settings(out / "mnt-obs.automount") if s == "Automount"}
    assert automount == {"Where": "/mnt/obs", "TimeoutIdleSec": "10min"}
    # _netdev: every zarrfs mount starts with the network file systems; nofail: wanted, not
    # required; x-systemd.automount: the .automount is pulled in, not the .mount;
    # noauto: no link at all; and nothing in local-fs.target, so early boot never waits for one
    units = [p for p in out.glob("*.target.*/*") if not p.name.endswith(".service")]
    links = {str(p.relative_to(out)) for p in units}
    assert links == {
        "remote-fs.target.wants/mnt-ocean.mount",
        "remote-fs.target.requires/mnt-obs.automount",
    }
