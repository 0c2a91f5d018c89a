"""Session and test fixtures of the remote-store tests (see ``fixtures.py``)."""

from remote.fixtures import (  # noqa: F401 - pytest fixtures
    bucket_fixture,
    moto_server_fixture,
    s3_env_fixture,
)
