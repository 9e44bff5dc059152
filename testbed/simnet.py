"""An in-process network for tests and experiments: hosts on lossy links
around one switch that runs ``esa.model.SwitchModel``, on a virtual clock.

Hosts see the same bytes they would on sockets: the switch decodes each
datagram, lets the model decide, and encodes what the model sends, so the
codec and the host agents run unchanged.  A PS's copy of a sum the switch
completed, and a sum it holds (ATP), come from the switch's address,
``addr`` (``p4src/include/replicas.p4``, ``forwarding.p4``); every other
datagram from the host that sent what the switch answers.  ``hosts.worker.drivers`` runs workers
through their calls on it.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from esa import model, wire
from hosts.net import payload
from hosts.net.transport import Addr, Bytes
from testbed.loopswitch import destinations


class Agent(Protocol):
    def poll(self, now: float) -> float | None: ...


@dataclass(eq=False)
class Host:
    """A host on the network; hosts compare by identity."""

    name: str
    port: int
    addr: Addr
    inbox: deque[tuple[bytes, Addr]] = field(default_factory=deque)


class SimTransport:
    """A host's side of the simulated network: every datagram goes to the switch."""

    def __init__(self, net: SimNet, host: Host) -> None:
        self.net, self.host = net, host

    def send(self, data: Bytes, addr: Addr) -> None:
        self.net.send_to_switch(self.host, bytes(data))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        if not self.host.inbox:
            return None
        data, src = self.host.inbox.popleft()
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        return n, src

    def wait(self, timeout: float) -> None:
        raise RuntimeError("simulated hosts are driven by SimNet.run, not by waiting")


Drop = Callable[[str, str, bytes], bool]
"""(from, to, payload) -> drop it?  The switch is named ``"switch"``."""


class SimNet:
    """Star network: each host one link to the switch at ``addr``; ``loss``
    per hop, plus an optional ``drop`` rule for scripted losses."""

    def __init__(
        self,
        switch: model.SwitchModel,
        loss: float = 0.0,
        delay: float = 10e-6,
        seed: int = 0,
        drop: Drop | None = None,
        addr: Addr = ("10.0.0.254", wire.UDP_PORT),
    ) -> None:
        self.switch, self.loss, self.delay, self.drop = switch, loss, delay, drop
        self.as_switch = Host("switch", 0, addr)
        self.rng = random.Random(seed)
        self.now = 0.0
        self.hosts: dict[str, Host] = {}
        self.by_port: dict[int, Host] = {}
        self.ps_of: dict[int, tuple[Host, ...]] = {}
        self.workers_of: dict[int, list[Host]] = {}
        self.events: list[tuple[float, int, Host | None, bytes, Host]] = []
        self.order = 0
        self.agents: list[Agent] = []
        self.lost = 0
        self.delivered = 0

    def transport(self, name: str) -> SimTransport:
        port = len(self.hosts) + 1
        host = Host(name, port, (f"10.0.0.{port}", wire.UDP_PORT))
        self.hosts[name] = host
        self.by_port[port] = host
        return SimTransport(self, host)

    def port(self, name: str) -> int:
        return self.hosts[name].port

    def route(self, job: int, ps: tuple[str, ...], workers: list[str]) -> None:
        """The switch's multicast groups and PS routes of ``job``: chunk
        ``seq`` goes to ``ps[ps_shard(seq, len(ps))]`` (the job's
        ``JobConfig.ps_ports`` are these hosts' ``port``s, in this order)."""
        self.ps_of[job] = tuple(self.hosts[name] for name in ps)
        self.workers_of[job] = [self.hosts[w] for w in workers]

    def add_agent(self, agent: Agent) -> None:
        self.agents.append(agent)

    def send_to_switch(self, src: Host, data: bytes) -> None:
        self._schedule(None, data, src)

    def _schedule(self, dst: Host | None, data: bytes, src: Host) -> None:
        hop = (src.name, "switch") if dst is None else ("switch", dst.name)
        if self.rng.random() < self.loss or (self.drop is not None and self.drop(*hop, data)):
            self.lost += 1
            return
        self.order += 1
        heapq.heappush(self.events, (self.now + self.delay, self.order, dst, data, src))

    def _switch(self, data: bytes, src: Host) -> None:
        try:
            pkt = payload.to_model(data)
        except payload.Malformed:
            return
        res = self.switch.process(pkt, int(self.now * 1e6), in_port=src.port)
        for out in res.outputs:
            p = out.packet
            frame = payload.from_model(p)
            pses = self.ps_of.get(p.job, ())
            for d in destinations(out, self.workers_of.get(p.job, []), pses):
                to_ps = out.to is model.Out.ALL or p.ptype is wire.PacketType.RESULT
                from_switch = to_ps and d in pses
                self._schedule(d, frame, self.as_switch if from_switch else src)

    def run(self, stop: Callable[[], bool], max_time: float) -> None:
        """Advance virtual time until ``stop()`` or ``max_time`` (then raise)."""
        while not stop():
            wake = [t for a in self.agents if (t := a.poll(self.now)) is not None]
            if stop():
                return
            nxt = min([*wake, self.events[0][0]] if self.events else wake, default=None)
            if nxt is None:
                raise RuntimeError("simulation stalled: no events and no timers")
            self.now = max(self.now, nxt)
            if self.now > max_time:
                raise TimeoutError(f"simulation passed {max_time} s")
            while self.events and self.events[0][0] <= self.now:
                _, _, dst, data, src = heapq.heappop(self.events)
                if dst is None:
                    self._switch(data, src)
                else:
                    self.delivered += 1
                    dst.inbox.append((data, src.addr))
