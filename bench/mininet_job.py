"""One job on Mininet hosts around BMv2, built as ``make run`` builds it, for
benchmarks: the controller (``esa-ctl serve``), the job admitted under ESA
and its PS (``esa-ps``) on the topology's hosts; the benchmark starts the
workers on the job's worker hosts.

Mininet's switch ports live in the network namespace it runs in, so the
bed runs in a private world as ``make run`` does: ``in_private_world``
starts the calling command again in fresh network, PID and mount
namespaces, and everything it starts ends with them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from esa.job import JobSpec
from esa.toolchain import missing_binaries
from runner import network as topo_mod
from runner import switches
from runner.ctl import Ctl
from runner.devices.netns import missing_root
from runner.jobs import start_pses, stop_pses
from runner.network import JobHosts
from runner.scenario import RunJob, Scenario
from runner.world import World

PRIVATE_ENV = "ESA_BENCH_PRIVATE"
"""set in the command started again inside the private world."""


def missing() -> str | None:
    """Why the bed can not run here, or None."""
    return missing_root() or missing_binaries(*switches.BMV2_BINARIES, "unshare", "mnexec")


def inside() -> bool:
    return os.environ.get(PRIVATE_ENV) == "1"


def in_private_world(module: str, argv: Sequence[str]) -> int:
    """``python -m module argv`` in fresh network, PID and mount namespaces;
    its exit status."""
    cmd = [
        "unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child",
        "--propagation", "private", "--", "bash", "-c", 'ip link set lo up && exec "$@"', "bash",
        sys.executable, "-m", module, *argv,
    ]  # fmt: skip
    return subprocess.run(cmd, env={**os.environ, PRIVATE_ENV: "1"}, check=False).returncode


@contextlib.contextmanager
def mininet_job(
    spec: JobSpec, window: int, logs: Path
) -> Iterator[tuple[World, Scenario, JobHosts]]:
    """The world, its scenario, and the job's hosts, ready for the workers;
    the switch's and the hosts' logs go to ``logs``."""
    scenario = Scenario(jobs=(RunJob(spec),), schemes=("esa",), window=window)
    topo = topo_mod.load(scenario.topology)
    program = switches.build(switches.BMV2, scenario.pool_size)
    with (
        tempfile.TemporaryDirectory(prefix="esa-bench-") as work,
        World(scenario, topo, program, logs, Path(work)) as world,
    ):
        hosts = world.jobs[spec.job]
        ctl = Ctl(world.admin)
        try:
            ctl.set_scheme(
                "esa", scenario.stale_us, scenario.squat_us, scenario.part_size, scenario.layout
            )
            ctl.admit(spec, hosts.placement)
            pses: dict[str, subprocess.Popen[str]] = {}
            try:
                start_pses(world, (spec,), pses)
                yield world, scenario, hosts
            finally:
                stop_pses(world, pses)
        finally:
            ctl.close()
