"""One scheme's world: Mininet hosts around the topology's switches, and the
controller.

The switches, the hosts, their addresses and switch ports and the links come
from the scenario's topology (``runner.network``); every switch is BMv2
or the reference switch (``runner.switches``), with the device id and
P4Runtime address the fabric gives it and a Thrift port of its own
(``THRIFT_PORT`` + its place in the file).  Links are plain veths; their
loss, bandwidth and delay come from ``runner.links``, which fails when
a property can not be applied (Mininet's TCLink would only log it).  The
controller runs once, as ``esa-ctl serve`` given the fabric, with a state
file in the world's work directory, and logs every P4Runtime request it
sends (``<switch>-p4runtime-requests.txt`` with one switch,
``p4runtime-requests.txt`` with several); a switch and the controller can
each be crashed and restarted (``restart_switch``, ``restart_controller``)
and the entries the switches hold read back over read-only P4Runtime
sessions (``entries``), so a fault's re-sync is checked on the switches
themselves.

The hosts' shells find ``esa-ctl``, ``esa-worker`` and ``esa-ps`` on their
PATH, and ``esa-ctl`` finds the controller (``ESA_CTL_ADDR``): a user at the
Mininet prompt types ``h1 esa-ctl jobs`` as on any machine.
"""

from __future__ import annotations

import json
import os
import re
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

from controller.api.admin import AdminClient, AdminError
from controller.device.entries import SwitchEntries
from controller.device.switch import P4RuntimeSwitch
from controller.world.fabric import Device
from runner import links
from runner.capture import Capture
from runner.devices.bmv2 import THRIFT_PORT
from runner.devices.nodes import Bmv2MininetSwitch, RefMininetSwitch
from runner.devices.thrift import RegisterReader
from runner.network import HostRole, Network, assign
from runner.paths import ROOT
from runner.scenario import LinkShape, Scenario
from runner.switches import BMV2, Program
from runner.timeline import FabricRegisters, P4RuntimeRegisters, Registers

PY = sys.executable
CONTROLLER_ELECTION_ID = 10
READER_ELECTION_ID = (0, 1)
"""below the controller's: the run's reads never take the switch from it."""
TIMELINE_ELECTION_ID = (0, 2)
"""the slot timeline's long-lived session with a reference switch: below the
controller's, and not the entry reads' (a switch refuses an election id two
sessions share)."""
CONTROLLER_INTERVAL_S = 0.5
"""how often the controller checks the switch: bounds the re-sync after a crash."""
START_TIMEOUT_S = 30.0
_METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)$", re.M)
"""``esa-ctl serve``'s line naming the address its metrics are on."""


def _sh(cmd: str) -> tuple[int, str]:
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
    return res.returncode, res.stdout + res.stderr


class World:
    def __init__(
        self,
        scenario: Scenario,
        topology: Network,
        program: Program,
        logs: Path,
        work: Path,
        pcaps: Path | None = None,
        trace: bool = False,
        metrics: bool = False,
    ) -> None:
        """``work``: a private directory for sockets and state; ``logs`` and
        ``pcaps`` (None: no captures) are kept; ``trace``: BMv2 logs every
        packet's way through the pipeline to the switch's log; ``metrics``:
        the controller serves its counters to Prometheus on a free port of
        127.0.0.1 (``metrics_url``)."""
        self.scenario = scenario
        self.topo = topology
        self.program = program
        self.work = work
        self.admin = f"unix:{work / 'esa-ctl.sock'}"
        self.logs = logs
        self.pcaps = pcaps
        self.trace = trace
        self.metrics = metrics
        self.metrics_url: str | None = None
        """where the controller serves its metrics, once started with ``metrics``."""
        logs.mkdir(parents=True, exist_ok=True)
        self.jobs = assign(scenario, topology)
        self.net: Any = None
        self.switches: dict[str, Bmv2MininetSwitch | RefMininetSwitch] = {}
        self.capture: Capture | None = None
        self.ctl: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[str]] = []

    @property
    def p4rt_log(self) -> Path:
        """One log for every switch: each request names its device id."""
        names = [d.name for d in self.topo.switches]
        prefix = f"{names[0]}-" if len(names) == 1 else ""
        return self.logs / f"{prefix}p4runtime-requests.txt"

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
        if self.pcaps:
            self.pcaps.mkdir(parents=True, exist_ok=True)
        for index, device in enumerate(self.topo.switches):
            self.switches[device.name] = self._add_switch(index, device)
        prefix = self.topo.prefix_len
        for a in self.topo.links:
            h = net.addHost(a.host.name, ip=f"{a.host.ip}/{prefix}", mac=a.host.mac)
            net.addLink(h, self.switches[a.switch], port2=a.port)
        for t in self.topo.trunks:
            sw, peer = self.switches[t.switch], self.switches[t.peer]
            net.addLink(sw, peer, port1=t.port, port2=t.peer_port)
        net.build()
        net.start()
        if self.pcaps and self.program.kind is not BMV2:
            ifaces = [i.name for sw in self.switches.values() for i in sw.intfList()]
            ifaces = [name for name in ifaces if name != "lo"]
            self.capture = Capture(ifaces, self.pcaps, self.logs / "tcpdump.log")
        net.staticArp()
        for h in net.hosts:
            for d in self.topo.switches:
                h.cmd(f"ip neigh replace {d.ip} lladdr {d.mac} dev {h.name}-eth0")
            # checksum offload would leave UDP checksums unfilled on the wire
            for off in ("tx", "rx"):
                h.cmd(f"ethtool -K {h.name}-eth0 {off} off >/dev/null 2>&1")
        self._apply_links()
        self._start_controller()

    def _add_switch(self, index: int, device: Device) -> Bmv2MininetSwitch | RefMininetSwitch:
        """The fabric's ``index``-th switch; BMv2 gets a work directory (its
        notifications socket) and a Thrift port of its own."""
        where = {"grpc_addr": device.p4runtime, "device_id": device.device_id}
        sw: Bmv2MininetSwitch | RefMininetSwitch
        if self.program.kind is not BMV2:
            sw = self.net.addSwitch(
                device.name, cls=RefMininetSwitch, log_dir=str(self.logs),
                pool=self.scenario.pool_size, **where,
            )  # fmt: skip
            return sw
        work = self.work / device.name
        work.mkdir()
        sw = self.net.addSwitch(
            device.name, cls=Bmv2MininetSwitch, log_dir=str(self.logs), work_dir=str(work),
            thrift_port=THRIFT_PORT + index, pcap_dir=str(self.pcaps) if self.pcaps else None,
            trace=self.trace, **where,
        )  # fmt: skip
        return sw

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self.procs:
            _stop(p)
        if self.ctl is not None:
            _stop(self.ctl)
        for sw in self.switches.values():
            # before Mininet removes the links: the switch's log ends where it stopped
            sw.halt()
        if self.net is not None:
            self.net.stop()
        if self.capture is not None:
            self.capture.stop()

    def host(self, name: str) -> Host:
        return self.net.get(name)

    def members(self) -> list[HostRole]:
        return [m for hosts in self.jobs.values() for m in hosts.members]

    # -- links --

    def _host_exec(self, name: str) -> links.Exec:
        host = self.host(name)

        def run(cmd: str) -> tuple[int, str]:
            out, err, code = host.pexec(["bash", "-c", cmd])
            return int(code), out + err

        return run

    def link_of(self, host: str) -> LinkShape:
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
            links.apply_shaping(_sh, f"{a.switch}-eth{a.port}", link)
        for t in self.topo.trunks:
            links.apply_shaping(_sh, f"{t.switch}-eth{t.port}", t.link)
            links.apply_shaping(_sh, f"{t.peer}-eth{t.peer_port}", t.link)

    def dropped(self, names: list[str]) -> int:
        """Frames these hosts' links dropped, both ways: by their loss rules
        and, on a shaped link, from its full queues."""
        lossy = [n for n in names if self.link_of(n).loss_pct]
        total = sum(links.read_dropped(self._host_exec(n)) for n in lossy)
        for n in names:
            link = self.link_of(n)
            if link.bw_mbps or link.delay_ms:
                a = self.topo.attachment(n)
                total += links.read_qdisc_drops(self._host_exec(n), f"{n}-eth0")
                total += links.read_qdisc_drops(_sh, f"{a.switch}-eth{a.port}")
        return total

    def loss_drops(self) -> dict[str, dict[str, object]]:
        """Per host with a lossy link: its roles (``j1w0``, ``j1ps0``) and the
        frames its loss rules dropped on the way ``up`` (from the host) and
        ``down`` (to it)."""
        roles: dict[str, list[str]] = {}
        for m in self.members():
            if self.link_of(m.name).loss_pct:
                roles.setdefault(m.name, []).append(m.role)
        out: dict[str, dict[str, object]] = {}
        for name, its in roles.items():
            hooks = links.read_dropped_by_hook(self._host_exec(name))
            out[name] = {"roles": its, "up": hooks["egress"], "down": hooks["ingress"]}
        return out

    # -- controller --

    def _topology(self) -> Path:
        """The fabric, with the scenario's pool, as the controller's topology file."""
        path = self.logs / "topology.json"
        fabric = {**self.topo.fabric.to_json(), "pool_size": self.scenario.pool_size}
        path.write_text(json.dumps(fabric, indent=1))
        return path

    def _start_controller(self) -> None:
        cmd = [
            PY, "-m", "controller", "--admin", self.admin, "serve",
            "--p4json", str(self.program.device_config), "--p4info", str(self.program.p4info),
            "--topology", str(self._topology()), "--db", str(self.work / "esa-ctl.db"),
            "--election-id", str(CONTROLLER_ELECTION_ID),
            "--interval", str(CONTROLLER_INTERVAL_S), "--p4rt-log", str(self.p4rt_log),
        ]  # fmt: skip
        for name, sw in self.switches.items():
            if isinstance(sw, Bmv2MininetSwitch):
                cmd += ["--thrift-cli", f"{name}={shlex.join(sw.cli_command())}"]
        if self.metrics:
            cmd += ["--metrics", "127.0.0.1:0"]
        log_path = self.logs / "controller.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            # its own session: a Ctrl-C reaches the run, which stops it in order
            self.ctl = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.controller_ready():
            if self.ctl.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller did not start; see {self.logs / 'controller.log'}")
            time.sleep(0.2)
        if self.metrics:
            # logged before the admin API starts, so there by now
            with open(log_path, "rb") as log:
                log.seek(start)
                found = _METRICS_LINE.search(log.read().decode(errors="replace"))
            if found is None:
                raise RuntimeError(f"controller logged no metrics address; see {log_path}")
            self.metrics_url = found[1]

    def controller_ready(self) -> bool:
        """The controller answers and holds every switch."""
        client = AdminClient(self.admin)
        try:
            held = {s.name for s in client.status(timeout=2.0).switches if s.connected}
            return held == set(self.switches)
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

    def restart_switch(self, name: str = "") -> None:
        """Kill a switch (SIGKILL, as a crash; "": the topology's default one)
        and start it again, empty."""
        self.switches[name or self.topo.default_switch].restart(crash=True)

    def registers(self) -> Registers:
        """Whole-array register reads of every switch, as one pool: BMv2's
        over Thrift, the reference switch's over P4Runtime."""
        readers: list[Registers] = []
        for device in self.topo.switches:
            sw = self.switches[device.name]
            if isinstance(sw, Bmv2MininetSwitch):
                readers.append(RegisterReader(sw.cli_command()))
            else:
                readers.append(P4RuntimeRegisters(device, TIMELINE_ELECTION_ID))
        return FabricRegisters(readers)

    def entries(self) -> dict[str, SwitchEntries]:
        """What each switch holds now, read over read-only P4Runtime sessions."""
        return {d.name: _entries(d) for d in self.topo.switches}

    # -- hosts' programs --

    def popen(self, host_name: str, cmd: list[str], log: str) -> subprocess.Popen[str]:
        with open(self.logs / log, "w") as err:
            p: subprocess.Popen[str] = self.host(host_name).popen(
                cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=err, text=True
            )
        self.procs.append(p)
        return p


def _entries(device: Device) -> SwitchEntries:
    reader = P4RuntimeSwitch.connect(
        device.p4runtime, device.device_id, READER_ELECTION_ID, require_primary=False
    )
    try:
        if reader.session.cookie is None:  # no pipeline yet: nothing is written
            return SwitchEntries()
        return reader.read_entries()
    finally:
        reader.close()


def _stop(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
