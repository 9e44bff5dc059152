"""A fabric of switches as ``esa.model`` states them: one ``SwitchModel`` per
device, each configured from the entries the controller writes to that
device (``controller.world.plan``'s ``SwitchEntries``), and the wiring of
``controller.world.fabric.Fabric`` between them.

Each model output is forwarded as ``forwarding.p4`` and ``replicas.p4`` do:
UP to the job's up port, a PS-bound packet by the ``ps_route`` entry of the
chunk in its header (rewriting MAC and IP), a result to all to that entry's
group, a PS result or pull to the arriving job's "workers" group; every
multicast copy with a rid is addressed by its ``replicas`` entry, and a PS
result or pull never leaves by the port it came in on (D2).  A frame out of
a port with a link arrives at the peer's port; one out of a host's port is
delivered to the host; any other port loses it.

Event order: ``send`` runs one frame to quiescence before it returns, in
breadth-first order (a FIFO of arrivals; a multicast's copies in ascending
(port, rid)).  On a tree the arrivals at one device within one cascade are
causally ordered (copies diverge into disjoint subtrees, and nothing but the
result of a sum comes back down the link the sum went up), so every device's
state and every host's frames after a cascade do not depend on the order
BMv2 serves its ports in.  What a differential test must ensure is that
cascades do not overlap: the next frame enters the fabric only after every
device has taken every frame of the last one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from controller.device.entries import SwitchEntries
from controller.world.fabric import Fabric
from esa.job import MAX_PS_SHARDS
from esa.model import JobConfig, Out, Output, Packet, SwitchModel, route_key
from esa.wire import PacketType


@dataclass(frozen=True)
class Addr:
    """Where a frame is addressed: destination MAC, IPv4 and UDP port."""

    mac: int
    ip: int
    udp_port: int


@dataclass(frozen=True)
class Frame:
    packet: Packet
    dst: Addr


@dataclass(frozen=True)
class Arrival:
    """``frame`` entering ``device`` on ``port``, from a host or a link."""

    device: str
    port: int
    frame: Frame


@dataclass(frozen=True)
class Delivery:
    host: str
    frame: Frame


@dataclass(frozen=True)
class Cascade:
    """Everything one frame sent by a host causes, in processing order."""

    arrivals: tuple[Arrival, ...]
    """the first is the sent frame at its host's switch."""
    delivered: tuple[Delivery, ...]
    lost: tuple[tuple[str, int, Frame], ...] = ()
    """frames sent out of a port with neither host nor link (device, port)."""


def job_configs(entries: SwitchEntries) -> dict[int, JobConfig]:
    """The model's job rows of a device: its ``jobs`` and ``children`` entries."""
    children: dict[int, list[tuple[int, int]]] = {}
    for key, child in entries.children.items():
        children.setdefault(key.job, []).append((key.port, child.bitmap))
    return {
        job: JobConfig.from_entry(e, tuple(sorted(children.get(job, ()))))
        for job, e in entries.jobs.items()
    }


def routed_keys(entries: SwitchEntries) -> set[tuple[int, int]]:
    """The ``route_key``s some ``ps_route`` entry matches."""
    return {
        route_key(k.job, low)
        for k in entries.ps_routes
        for low in range(MAX_PS_SHARDS)
        if low & k.mask == k.value
    }


@dataclass
class DeviceModel:
    """One switch: the slot rules (``model``) and the tables around them."""

    model: SwitchModel
    entries: SwitchEntries = field(default_factory=SwitchEntries)

    def program(self, entries: SwitchEntries) -> None:
        """Take ``entries`` as the device's tables; slots and counters stay."""
        self.entries = entries
        self.model.jobs = job_configs(entries)
        self.model.ps_routes = routed_keys(entries)
        self.model.policy = entries.policy.policy
        self.model.stale_us = entries.policy.stale_us
        self.model.squat_us = entries.policy.squat_us

    def _route(self, pkt: Packet) -> tuple[int, Addr, int]:
        """The matching ``ps_route`` entry: port, address of the PS, "all" group."""
        for k, r in self.entries.ps_routes.items():
            if k.job == pkt.job and pkt.seq & k.mask == k.value:
                return r.port, Addr(r.mac, r.ip, 0), r.mgid_all
        raise KeyError(f"no ps_route for job {pkt.job} seq {pkt.seq}")

    def forward(self, arrived: Frame, in_port: int, o: Output) -> list[tuple[int, Frame]]:
        """The copies of one model output, each with its egress port."""
        p, dst = o.packet, arrived.dst
        job = self.entries.jobs[arrived.packet.job]
        if o.to is Out.PS:
            port, ps, _ = self._route(p)
            return [(port, Frame(p, replace(ps, udp_port=dst.udp_port)))]
        if o.to is Out.UP:
            return [(job.up_port, Frame(p, dst))]
        group = self._route(p)[2] if o.to is Out.ALL else job.mgid_workers
        spread = p.ptype in (PacketType.PS_RESULT, PacketType.PULL)
        out = []
        for port, rid in sorted(self.entries.groups.get(group, ())):
            if spread and port == in_port:
                continue
            r = self.entries.replicas.get(rid) if rid else None
            out.append((port, Frame(p, Addr(r.mac, r.ip, r.udp_port) if r else dst)))
        return out


class FabricModel:
    """Every device of ``fabric`` as a ``DeviceModel``, wired as the fabric is."""

    def __init__(self, fabric: Fabric, pool_size: int) -> None:
        self.fabric = fabric
        self.devices = {name: DeviceModel(SwitchModel(pool_size)) for name in fabric.devices}
        self._hosts = {(fabric.home(n), h.port): n for n, h in fabric.hosts.items()}

    def program(self, device: str, entries: SwitchEntries) -> None:
        self.devices[device].program(entries)

    def send(self, host: str, frame: Frame, now_us: int) -> Cascade:
        """``frame`` sent by ``host``, run through the fabric to quiescence."""
        queue = [Arrival(self.fabric.home(host), self.fabric.hosts[host].port, frame)]
        done: list[Arrival] = []
        delivered: list[Delivery] = []
        lost: list[tuple[str, int, Frame]] = []
        while queue:
            a = queue.pop(0)
            done.append(a)
            dev = self.devices[a.device]
            res = dev.model.process(a.frame.packet, now_us, in_port=a.port)
            for o in res.outputs:
                for port, out in dev.forward(a.frame, a.port, o):
                    peer = self.fabric.peer(a.device, port)
                    if peer is not None:
                        queue.append(Arrival(peer[0], peer[1], out))
                    elif (a.device, port) in self._hosts:
                        delivered.append(Delivery(self._hosts[a.device, port], out))
                    else:
                        lost.append((a.device, port, out))
        return Cascade(tuple(done), tuple(delivered), tuple(lost))
