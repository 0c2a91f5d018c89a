"""Fixtures for remote-store tests (imported by ``tests/remote/conftest.py`` and by the store
contract modules in ``tests/core/stores``).

- ``moto_server``: one moto S3 server per session, in its own process (``motoserver.py``);
- ``s3_env``: the AWS_* variables a client of it needs, set for this test (and returned, for
  a mount daemon's environment);
- ``bucket``: a fresh empty bucket.

Import the ``*_fixture`` functions to use them; pytest knows them by the names above.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.motoserver import CREDENTIALS, MotoProcess


@pytest.fixture(scope="session", name="moto_server")
def moto_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoProcess]:
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with MotoProcess(lifetime=3600, log_path=Path(log)) as server:
        yield server


@pytest.fixture(name="s3_env")
def s3_env_fixture(moto_server: MotoProcess, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return dict(CREDENTIALS)


@pytest.fixture(name="bucket")
def bucket_fixture(moto_server: MotoProcess, s3_env: dict[str, str]) -> str:
    return moto_server.new_bucket()
