"""``-o credentials=FILE`` and ``-o env.NAME=VALUE``: parsing, file checks, argv hygiene."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zarrfs.fuse.credentials import (
    CredentialsError,
    apply_environment,
    read_credentials_file,
    split_environment,
)
from zarrfs.fuse.options import OptionError, parse_options

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def test_env_options_are_parsed_and_never_shown() -> None:
    options = parse_options([f"ro,env.AWS_SECRET_ACCESS_KEY={SECRET},env.EMPTY="])
    assert options.ro
    assert options.environment == (("AWS_SECRET_ACCESS_KEY", SECRET), ("EMPTY", ""))
    assert SECRET not in repr(options)
    with pytest.raises(OptionError) as bad:
        parse_options([f"env.1BAD={SECRET}"])
    assert SECRET not in str(bad.value) and "1BAD" in str(bad.value)
    with pytest.raises(OptionError, match="needs a value"):
        parse_options(["env.AWS_REGION"])
    with pytest.raises(
        OptionError, match=r"unknown mount option: 'evn.AWS_SECRET_ACCESS_KEY=\.\.\.'"
    ) as typo:
        parse_options([f"evn.AWS_SECRET_ACCESS_KEY={SECRET}"])
    assert SECRET not in str(typo.value)


def test_split_environment_keeps_values_out_of_argv() -> None:
    kept, env = split_environment([f"ro,env.AWS_SECRET_ACCESS_KEY={SECRET}", "env.A=1", "x=2"])
    assert kept == ["ro", "x=2"]
    assert env == {"AWS_SECRET_ACCESS_KEY": SECRET, "A": "1"}


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_credentials_file_lines(tmp_path: Path) -> None:
    text = (
        "# comment\n\nAWS_ACCESS_KEY_ID=AKIA1\n"
        f"export AWS_SECRET_ACCESS_KEY='{SECRET}'\n"
        'AWS_SESSION_TOKEN="a b"\n'
    )
    path = write(tmp_path / "c", text, 0o600)
    assert read_credentials_file(str(path)) == {
        "AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": "a b",
    }  # fmt: skip
    environ: dict[str, str] = {"KEEP": "1"}
    options = parse_options([f"credentials={path},env.AWS_ACCESS_KEY_ID=AKIA2"])
    names = apply_environment(options, environ)
    assert names == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
    assert environ["AWS_ACCESS_KEY_ID"] == "AKIA2" and environ["KEEP"] == "1"  # env. wins


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o666])
def test_a_file_others_can_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "c", f"AWS_SECRET_ACCESS_KEY={SECRET}\n", mode)
    with pytest.raises(CredentialsError, match=f"refusing credentials file .*{mode:04o}") as e:
        read_credentials_file(str(path))
    assert SECRET not in str(e.value)


def test_ownership_missing_and_malformed(tmp_path: Path) -> None:
    path = write(tmp_path / "c", f"AWS_SECRET_ACCESS_KEY={SECRET}\n", 0o600)
    if os.geteuid() == 0:
        os.chown(path, 4242, -1)  # another user's file
        with pytest.raises(CredentialsError, match="owned by uid 4242, not by root"):
            read_credentials_file(str(path))
    else:  # the user's own file, read by a daemon of another user
        with pytest.raises(CredentialsError, match="not by root"):
            read_credentials_file(str(path), euid=os.geteuid() + 1)
    with pytest.raises(CredentialsError, match="No such file"):
        read_credentials_file(str(tmp_path / "missing"))
    bad = write(tmp_path / "bad", f"this is {SECRET}\n", 0o600)
    with pytest.raises(CredentialsError, match="line 1: not NAME=VALUE") as e:
        read_credentials_file(str(bad))
    assert SECRET not in str(e.value)


def test_metrics_address() -> None:
    assert parse_options(["metrics=127.0.0.1:9464"]).metrics == ("127.0.0.1", 9464)
    assert parse_options(["metrics=[::1]:9464"]).metrics == ("::1", 9464)
    assert parse_options([]).metrics is None
    for bad in ("metrics=9464", "metrics=host:", "metrics=host:70000"):
        with pytest.raises(OptionError, match="ADDRESS:PORT"):
            parse_options([bad])
