"""Session and test fixtures of the remote-store tests (see ``fixtures.py``)."""

from remote.fixtures import bucket, moto_server, s3_env  # noqa: F401 - pytest fixtures
