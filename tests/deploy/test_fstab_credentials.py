"""An fstab line that carries credentials: ``credentials=FILE`` and ``env.NAME=VALUE``.

The store is an S3 bucket on a moto server (127.0.0.1) that checks signatures: after setup
only the IAM access key made here is accepted, so a mount that reads data proves the daemon got
the key from the options. The mount goes through mount(8) and mount.fuse3 (type
``fuse.zarrfs``), the way an fstab line or a .mount unit is mounted; when
/usr/local/bin/zarrfs is not this checkout, mount.fuse3 is run directly with this checkout's
``zarrfs`` first on its PATH (mount(8) gives helpers a fixed PATH). Neither ``ps`` nor the
daemon's log (at log_level=debug) ever shows the secret.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import numpy as np
import pytest
import zarr
from fstab import mount_fstab
from remote.motoserver import MotoProcess, download_tree, upload_tree

from zarrfs.fuse import runtime

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mount(8) needs root"),
    pytest.mark.skipif(shutil.which("mount.fuse3") is None, reason="needs fuse3"),
]
REGION = "us-east-1"


@dataclass
class Bucket:
    endpoint: str
    name: str
    key_id: str
    secret: str
    expected: np.ndarray

    def client(self, secret: str | None = None):  # type: ignore[no-untyped-def]
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=self.key_id, aws_secret_access_key=secret or self.secret,
        )  # fmt: skip


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[Bucket]:
    """A bucket holding ``ocean.zarr`` on a moto server that accepts one IAM key only."""
    with MotoProcess(lifetime=600) as moto:
        iam = boto3.client("iam", endpoint_url=moto.endpoint, region_name=REGION,
                           aws_access_key_id="setup", aws_secret_access_key="setup")  # fmt: skip
        iam.create_user(UserName="zarrfs")
        allow = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [allow]}
        iam.put_user_policy(UserName="zarrfs", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="zarrfs")["AccessKey"]
        enforce = urllib.request.Request(
            moto.endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        urllib.request.urlopen(enforce, timeout=30).read()  # from now on requests are checked
        expected = np.arange(24 * 20, dtype="<f4").reshape(24, 20)
        local = tmp_path / "local.zarr"
        zarr.create_array(local, shape=expected.shape, chunks=(8, 10), dtype="<f4")[:] = expected
        b = Bucket(moto.endpoint, "ocean-data", key["AccessKeyId"], key["SecretAccessKey"],
                   expected)  # fmt: skip
        b.client().create_bucket(Bucket=b.name)
        upload_tree(b.client(), b.name, "ocean.zarr", local)
        with pytest.raises(Exception, match="SignatureDoesNotMatch"):
            b.client(secret="not-the-secret").list_objects_v2(Bucket=b.name)
        yield b


def all_command_lines() -> str:
    return subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def daemon_pid(mnt: Path) -> int:
    pid = runtime.find_daemon(str(mnt))
    assert pid is not None, "no daemon found for the mount"
    return pid


def unmount_and_wait(mnt: Path, pid: int) -> None:
    result = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 60
    while runtime.process_alive(pid):
        assert time.monotonic() < deadline, "the daemon did not exit"
        time.sleep(0.05)


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "mnt"
    path.mkdir()
    try:
        yield path
    finally:
        if runtime.mount_info(str(path)) is not None:
            pid = runtime.find_daemon(str(path))
            subprocess.run(["umount", "-l", str(path)], check=False)
            if pid is not None and runtime.process_alive(pid):
                os.kill(pid, 15)


def write_credentials(path: Path, bucket: Bucket, mode: int) -> None:
    path.write_text(
        "# S3 credentials of the ocean store\n"
        f"AWS_ACCESS_KEY_ID={bucket.key_id}\n"
        f'export AWS_SECRET_ACCESS_KEY="{bucket.secret}"\n'
        f"AWS_REGION={REGION}\n"
        f"AWS_ENDPOINT_URL={bucket.endpoint}\n"
    )
    path.chmod(mode)


def test_fstab_credentials_file(bucket: Bucket, mnt: Path, tmp_path: Path) -> None:
    creds = tmp_path / "ocean.credentials"
    write_credentials(creds, bucket, 0o600)
    source = f"s3://{bucket.name}/ocean.zarr"
    mounted = mount_fstab(
        source, mnt, f"credentials={creds},_netdev,nofail,log_level=debug", tmp_path
    )
    assert mounted.returncode == 0, mounted.stderr
    pid = daemon_pid(mnt)
    raw = mnt / "data.raw"
    assert raw.read_bytes() == bucket.expected.tobytes()
    with open(raw, "r+b", buffering=0) as f:
        f.write(np.full(20, -1.5, dtype="<f4").tobytes())
    lines = all_command_lines()
    assert str(creds) in lines  # the daemon is there, with the file's path only
    assert bucket.secret not in lines
    unmount_and_wait(mnt, pid)
    log = runtime.log_file(str(mnt)).read_text(errors="replace")
    assert "DEBUG" in log and bucket.secret not in log and bucket.key_id not in log
    assert bucket.secret not in mounted.stdout + mounted.stderr

    stored = tmp_path / "stored.zarr"
    download_tree(bucket.client(), bucket.name, "ocean.zarr", stored)
    bucket.expected[0] = -1.5
    assert np.array_equal(zarr.open_array(stored)[:], bucket.expected)


def test_a_credentials_file_others_can_read_is_refused(
    bucket: Bucket, mnt: Path, tmp_path: Path
) -> None:
    creds = tmp_path / "ocean.credentials"
    write_credentials(creds, bucket, 0o644)
    mounted = mount_fstab(f"s3://{bucket.name}/ocean.zarr", mnt, f"credentials={creds}", tmp_path)
    assert mounted.returncode != 0
    assert f"refusing credentials file {creds}: mode 0644" in mounted.stderr
    assert bucket.secret not in mounted.stderr
    assert runtime.mount_info(str(mnt)) is None


def test_fstab_env_options(bucket: Bucket, mnt: Path, tmp_path: Path) -> None:
    options = (
        f"env.AWS_ACCESS_KEY_ID={bucket.key_id},env.AWS_SECRET_ACCESS_KEY={bucket.secret},"
        f"env.AWS_REGION={REGION},env.AWS_ENDPOINT_URL={bucket.endpoint},ro,log_level=debug"
    )
    mounted = mount_fstab(f"s3://{bucket.name}/ocean.zarr", mnt, options, tmp_path)
    assert mounted.returncode == 0, mounted.stderr
    pid = daemon_pid(mnt)
    assert (mnt / "data.raw").read_bytes() == bucket.expected.tobytes()
    assert bucket.secret not in all_command_lines()  # the daemon got it through its environment
    unmount_and_wait(mnt, pid)
    assert bucket.secret not in runtime.log_file(str(mnt)).read_text(errors="replace")
