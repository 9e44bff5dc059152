"""Skips tests whose toolchain or privileges are missing, naming what is
missing; and lets hypothesis judge examples by what they show, never by how
long a loaded machine took to run or draw them.  Hypothesis draws the same
examples on every run (``derandomize``): a suite that passed passes again,
and a property that fails fails every time, with its example.  Set
``ESA_HYPOTHESIS=explore`` to draw new ones."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, settings
from p4.v1 import p4runtime_pb2_grpc

from esa.toolchain import missing_binaries
from refswitch.server import RefSwitchP4Runtime, ServedDevice
from runner.devices.bmv2 import missing_bmv2
from runner.devices.netns import missing_root
from tests.dataplane import WIDE_JOBS, Rig, build_program

settings.register_profile(
    "any_speed",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("ESA_HYPOTHESIS") != "explore",
)
settings.load_profile("any_speed")


def missing_mininet() -> str | None:
    """Why a Mininet run on the reference switch can't happen here, or None."""
    return missing_root() or missing_binaries("mnexec", "unshare")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = {
        "bmv2": missing_bmv2,
        "p4c": lambda: missing_binaries("p4c-bm2-ss"),
        "netns": missing_root,
        "model": missing_mininet,
    }
    for item in items:
        for marker, check in checks.items():
            if marker in item.keywords:
                reason = check()
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
                    break


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """BMv2 running p4src/esa.p4 beside esa.model, shared by a test module
    (each test resets it)."""
    r = Rig(build_program(tmp_path_factory.mktemp("p4")))
    yield r
    r.close()


@pytest.fixture(scope="module")
def wide_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """The ``rig`` with ``WIDE_JOBS``: jobs of three and four workers."""
    r = Rig(build_program(tmp_path_factory.mktemp("p4")), WIDE_JOBS)
    yield r
    r.close()


REFSWITCH_POOL = 8
"""Slots of the reference switch the ``device`` fixture serves."""


@pytest.fixture
def device(tmp_path: Path) -> Iterator[tuple[ServedDevice, str]]:
    """The reference switch in this process (``REFSWITCH_POOL`` slots),
    P4Runtime on a unix socket."""
    dev = ServedDevice(0, REFSWITCH_POOL)
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(RefSwitchP4Runtime(dev), srv)
    addr = f"unix:{tmp_path}/p4rt.sock"
    srv.add_insecure_port(addr)
    srv.start()
    yield dev, addr
    srv.stop(None)
