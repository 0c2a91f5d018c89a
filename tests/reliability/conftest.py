"""Fixtures of the reliability tests: faulty mounts (``faulty_daemon.py``) with a fault plan."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import FAULTY_DAEMON, FaultPlan, faulty_url


@pytest.fixture
def plan(tmp_path: Path) -> FaultPlan:
    return FaultPlan(tmp_path)


@pytest.fixture
def faulty_mount(mounter: Callable[..., Any], plan: FaultPlan) -> Callable[..., Any]:
    """``faulty_mount(store_dir, *options, name="mnt")``: mount ``faulty://store_dir`` with the
    test's ``plan`` (the plan starts empty: no faults until the test writes rules)."""

    def mount(store_dir: Path, *options: str, name: str = "mnt") -> Any:
        return mounter(
            faulty_url(store_dir), *options, name=name, env=plan.env, cmd_prefix=FAULTY_DAEMON
        )

    return mount
