"""One policy's world: Mininet hosts around one switch, and the controller.

The hosts, their addresses and switch ports and their links come from the
scenario's topology (``testbed.run.topology``); the switch is BMv2 or the
reference switch (``testbed.run.switches``).  Links are plain veths; their
loss, bandwidth and delay come from ``testbed.run.links``, which fails when
a property can not be applied (Mininet's TCLink would only log it).  The
controller runs as ``esa-ctl serve`` with a state file in the world's work
directory and logs every P4Runtime request it sends
(``<switch>-p4runtime-requests.txt``); the switch and the controller can
each be crashed and restarted (``restart_switch``, ``restart_controller``)
and the entries the switch holds read back over a read-only P4Runtime
session (``entries``), so a fault's re-sync is checked on the switch itself.

The hosts' shells find ``esa-ctl``, ``esa-worker`` and ``esa-ps`` on their
PATH, and ``esa-ctl`` finds the controller (``ESA_CTL_ADDR``): a user at the
Mininet prompt types ``h1 esa-ctl jobs`` as on any machine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host

from controller.admin import AdminClient, AdminError
from controller.entries import SwitchEntries
from controller.switch import P4RuntimeSwitch
from testbed.mininet_switch import Bmv2MininetSwitch, RefMininetSwitch
from testbed.paths import ROOT
from testbed.run import links
from testbed.run.capture import Capture
from testbed.run.scenario import Link, Scenario
from testbed.run.switches import BMV2, Program
from testbed.run.timeline import NoRegisters, Registers
from testbed.run.topology import Member, Topology, assign
from testbed.thrift import RegisterReader

PY = sys.executable
GRPC_ADDR = "127.0.0.1:9559"
CONTROLLER_ELECTION_ID = 10
READER_ELECTION_ID = (0, 1)
"""below the controller's: the run's reads never take the switch from it."""
CONTROLLER_INTERVAL_S = 0.5
"""how often the controller checks the switch: bounds the re-sync after a crash."""
START_TIMEOUT_S = 30.0


def _sh(cmd: str) -> tuple[int, str]:
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
    return res.returncode, res.stdout + res.stderr


class World:
    def __init__(
        self,
        scenario: Scenario,
        topology: Topology,
        program: Program,
        logs: Path,
        work: Path,
        pcaps: Path | None = None,
        trace: bool = False,
    ) -> None:
        """``work``: a private directory for sockets and state; ``logs`` and
        ``pcaps`` (None: no captures) are kept; ``trace``: BMv2 logs every
        packet's way through the pipeline to the switch's log."""
        self.scenario = scenario
        self.topo = topology
        self.program = program
        self.work = work
        self.admin = f"unix:{work / 'esa-ctl.sock'}"
        self.logs = logs
        self.pcaps = pcaps
        self.trace = trace
        logs.mkdir(parents=True, exist_ok=True)
        self.jobs = assign(scenario, topology)
        self.net: Any = None
        self.switch: Bmv2MininetSwitch | RefMininetSwitch | None = None
        self.capture: Capture | None = None
        self.ctl: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[str]] = []

    @property
    def switch_name(self) -> str:
        return self.topo.switch.name

    @property
    def p4rt_log(self) -> Path:
        return self.logs / f"{self.switch_name}-p4runtime-requests.txt"

    def __enter__(self) -> World:
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _host_environment(self) -> None:
        """What the hosts' shells inherit: the project's commands on PATH and
        the controller's admin address.  The virtualenv's directory goes last:
        first, its python3 would shadow the system's, which simple_switch_CLI
        runs under (and which has the thrift module)."""
        bindir = str(Path(PY).parent)
        path = os.environ.get("PATH", "")
        if bindir not in path.split(os.pathsep):
            os.environ["PATH"] = os.pathsep.join([path, bindir]) if path else bindir
        os.environ["ESA_CTL_ADDR"] = self.admin

    def _build(self) -> None:
        setLogLevel("critical")  # Mininet's resource-limit notices are not ours to fix
        self._host_environment()
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False)
        self.net = net
        name, logs = self.switch_name, str(self.logs)
        if self.program.kind is BMV2:
            pcaps = str(self.pcaps) if self.pcaps else None
            if self.pcaps:
                self.pcaps.mkdir(parents=True, exist_ok=True)
            self.switch = net.addSwitch(
                name,
                cls=Bmv2MininetSwitch,
                log_dir=logs,
                work_dir=str(self.work),
                pcap_dir=pcaps,
                trace=self.trace,
            )
        else:
            self.switch = net.addSwitch(
                name, cls=RefMininetSwitch, log_dir=logs, pool=self.scenario.pool_size
            )
        prefix = self.topo.prefix_len
        for node, link in zip(self.topo.hosts, self.topo.links, strict=True):
            h = net.addHost(node.name, ip=f"{node.ip}/{prefix}", mac=node.mac)
            net.addLink(h, self.switch, port2=link.port)
        net.build()
        net.start()
        if self.pcaps and self.program.kind is not BMV2:
            ifaces = [f"{name}-eth{a.port}" for a in self.topo.links]
            self.capture = Capture(ifaces, self.pcaps, self.logs / "tcpdump.log")
        net.staticArp()
        sw = self.topo.switch
        for h in net.hosts:
            h.cmd(f"ip neigh replace {sw.ip} lladdr {sw.mac} dev {h.name}-eth0")
            # checksum offload would leave UDP checksums unfilled on the wire
            for off in ("tx", "rx"):
                h.cmd(f"ethtool -K {h.name}-eth0 {off} off >/dev/null 2>&1")
        self._apply_links()
        self._start_controller()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self.procs:
            _stop(p)
        if self.ctl is not None:
            _stop(self.ctl)
        if self.switch is not None:
            # before Mininet removes the links: the switch's log ends where it stopped
            self.switch.halt()
        if self.net is not None:
            self.net.stop()
        if self.capture is not None:
            self.capture.stop()

    def host(self, name: str) -> Host:
        return self.net.get(name)

    def members(self) -> list[Member]:
        return [m for workers, ps in self.jobs.values() for m in (*workers, ps)]

    # -- links --

    def _host_exec(self, name: str) -> links.Exec:
        host = self.host(name)

        def run(cmd: str) -> tuple[int, str]:
            out, err, code = host.pexec(["bash", "-c", cmd])
            return int(code), out + err

        return run

    def link_of(self, host: str) -> Link:
        """The properties of ``host``'s link: the topology's, with the
        scenario's and the flags' on top."""
        return self.topo.attachment(host).link.overridden(self.scenario.link)

    def _apply_links(self) -> None:
        for a in self.topo.links:
            name = a.host.name
            link = self.link_of(name)
            if link.loss_pct:
                links.apply_loss(self._host_exec(name), f"{name}-eth0", link.loss_pct)
            links.apply_shaping(self._host_exec(name), f"{name}-eth0", link)
            links.apply_shaping(_sh, f"{self.switch_name}-eth{a.port}", link)

    def dropped(self, names: list[str]) -> int:
        """Frames the loss rules dropped on these hosts' links, both ways."""
        lossy = [n for n in names if self.link_of(n).loss_pct]
        return sum(links.read_dropped(self._host_exec(n)) for n in lossy)

    # -- controller --

    def _topology(self) -> Path:
        """Every host of the topology, as the controller's topology file."""
        hosts = {h.name: h.to_json() for h in self.topo.hosts}
        path = self.logs / "topology.json"
        path.write_text(json.dumps({"pool_size": self.scenario.pool_size, "hosts": hosts}))
        return path

    def _start_controller(self) -> None:
        cmd = [
            PY, "-m", "controller.cli", "--admin", self.admin, "serve",
            "--switch", GRPC_ADDR, "--p4json", str(self.program.device_config),
            "--p4info", str(self.program.p4info),
            "--topology", str(self._topology()), "--db", str(self.work / "esa-ctl.db"),
            "--election-id", str(CONTROLLER_ELECTION_ID),
            "--interval", str(CONTROLLER_INTERVAL_S), "--p4rt-log", str(self.p4rt_log),
        ]  # fmt: skip
        if isinstance(self.switch, Bmv2MininetSwitch):
            cmd += ["--thrift-cli", shlex.join(self.switch.cli_command())]
        with open(self.logs / "controller.log", "ab") as log:
            # its own session: a Ctrl-C reaches the run, which stops it in order
            self.ctl = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.controller_ready():
            if self.ctl.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller did not start; see {self.logs / 'controller.log'}")
            time.sleep(0.2)

    def controller_ready(self) -> bool:
        """The controller answers and holds the switch."""
        client = AdminClient(self.admin)
        try:
            return client.status(timeout=2.0).switch.connected
        except AdminError:
            return False
        finally:
            client.close()

    def restart_controller(self) -> None:
        """Kill the controller (SIGKILL, as a crash) and start it on the same state."""
        assert self.ctl is not None
        os.killpg(self.ctl.pid, signal.SIGKILL)
        self.ctl.wait()
        self._start_controller()

    # -- switch --

    def restart_switch(self) -> None:
        """Kill the switch (SIGKILL, as a crash) and start it again, empty."""
        assert self.switch is not None
        self.switch.restart(crash=True)

    def registers(self) -> Registers:
        """Whole-array register reads: BMv2's Thrift; the reference switch
        serves none, so its slot timeline has no slot counts."""
        if isinstance(self.switch, Bmv2MininetSwitch):
            return RegisterReader(self.switch.cli_command())
        return NoRegisters()

    def entries(self) -> SwitchEntries:
        """What the switch holds now, read over a read-only P4Runtime session."""
        reader = P4RuntimeSwitch.connect(GRPC_ADDR, 0, READER_ELECTION_ID, require_primary=False)
        try:
            if reader.session.cookie is None:  # no pipeline yet: nothing is written
                return SwitchEntries()
            return reader.read_entries()
        finally:
            reader.close()

    # -- hosts' programs --

    def popen(self, host_name: str, cmd: list[str], log: str) -> subprocess.Popen[str]:
        with open(self.logs / log, "w") as err:
            p: subprocess.Popen[str] = self.host(host_name).popen(
                cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=err, text=True
            )
        self.procs.append(p)
        return p


def _stop(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
