"""One job's worker processes, PS shards and switch model on a virtual
clock, with the faults the agreement must survive, for the model check
(``tests/test_agreement_model.py``).

Every host sees the bytes it would on sockets.  Data datagrams go through
``esa.model.SwitchModel``; control datagrams go host to host.  Each hop
may lose a datagram (``loss``) and delays it by a random 0.1 to 1 ms, so
datagrams overtake each other.  A PS shard can be restarted (a new
``ParameterServer`` on the same addresses, everything it held lost), a
worker process can crash (it is no longer polled) or be joined by a second
process with its index, and control datagrams can be forged, replayed or
mutated: those are handed to their target directly, and the target's state
must be the same after.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from esa import model, wire
from esa.job import Workers
from esa.spec import Policy
from esa.wire import ControlType
from hosts.agreement import auth
from hosts.net import payload, quant
from hosts.net.transport import Addr, Bytes
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from hosts.worker.errors import AllreduceError
from testbed.loopswitch import destinations

JOB, FAN_IN = 7, 2
KEY = bytes(range(100, 132))
SWITCH: Addr = ("10.0.0.254", wire.UDP_PORT)
TIMEOUT = 8.0
"""seconds each call may take."""
ASKING = 0.61
"""what a call may take after its deadline to ask the PS hosts who is missing."""
SPIN = 10_000
"""polls at one instant that prove an agent busy-waits."""


class VTransport:
    def __init__(self, world: World, addr: Addr) -> None:
        self.world, self.addr = world, addr

    def send(self, data: Bytes, to: Addr) -> None:
        self.world.send(self.addr, to, bytes(data))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        box = self.world.inboxes.get(self.addr)
        if not box:
            return None
        data, src = box.popleft()
        buf[: len(data)] = data
        return len(data), src

    def wait(self, timeout: float) -> None:
        raise AssertionError("virtual hosts are polled, never wait")


def size(call: int) -> int:
    """Values in call ``call`` of every run: 2 to 6 chunks."""
    return 40 + 37 * (call % 4)


def tensor(run: int, index: int, call: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng([run, index, call]).uniform(-1, 1, size(call)).astype(np.float32)


def exact(tensors: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """The sum of one tensor per worker, as the job computes it."""
    scale = quant.job_scale(1.0, FAN_IN)
    q = [quant.quantise(x, 1.0, scale).values.astype(np.int64) for x in tensors]
    return quant.dequantise(sum(q), scale).ravel()[: tensors[0].size]


@dataclass
class Outcome:
    number: int
    start: float
    end: float | None = None
    total: npt.NDArray[np.float32] | None = None
    error: AllreduceError | None = None


@dataclass(eq=False)
class Process:
    """A worker process: its run (the tensors it reduces) and its calls."""

    worker: Worker
    run: int
    control: Addr
    calls: list[Outcome] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return bool(self.calls) and self.calls[-1].end is None


class World:
    def __init__(self, shards: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.loss = 0.0
        self.shards = shards
        self.inboxes: dict[Addr, deque[tuple[bytes, Addr]]] = {}
        self.events: list[tuple[float, int, Addr, bytes, Addr]] = []
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.order = 0
        self.down: dict[Addr, float] = {}
        self.delivered: list[tuple[bytes, Addr, Addr]] = []
        """genuine control datagrams delivered so far: (data, from, to)."""
        self.ps_data = [(f"10.0.0.{10 + s}", wire.UDP_PORT) for s in range(shards)]
        self.ps_control = [(f"10.0.0.{10 + s}", wire.CONTROL_PORT) for s in range(shards)]
        self.worker_data = [(f"10.0.1.{i}", wire.UDP_PORT) for i in range(FAN_IN)]
        self.ports = {a: s + 1 for s, a in enumerate(self.ps_data)}
        self.ports.update({a: 100 + i for i, a in enumerate(self.worker_data)})
        self.switch = model.SwitchModel(pool_size=3, policy=Policy.ESA, stale_us=20_000)
        ports = tuple(range(1, shards + 1))
        self.switch.add_job(JOB, model.JobConfig(FAN_IN, 3, priority=1, ps_ports=ports))
        self.pses = [self._new_ps(s) for s in range(shards)]
        self.procs: list[Process] = []
        """the processes that run (are polled) now."""
        self.ever: list[Process] = []
        self.next_port = 40000
        self.next_run = 1
        self.attacks = 0
        self.state_changes = 0

    # -- hosts ---------------------------------------------------------------

    def _new_ps(self, s: int) -> ParameterServer:
        session = 1 + self.rng.randrange((1 << 32) - 1)
        return ParameterServer(
            VTransport(self, self.ps_data[s]), SWITCH, {JOB: Workers.of(FAN_IN)}, stall=0.05,
            clock=lambda: self.now, control=VTransport(self, self.ps_control[s]), shard=s,
            shards=self.shards, keys={JOB: KEY}, session=session,
        )  # fmt: skip

    def restart_ps(self, s: int, down: float) -> None:
        """PS shard ``s`` dies now and a new one listens ``down`` seconds later."""
        for a in (self.ps_data[s], self.ps_control[s]):
            self.inboxes.pop(a, None)
            self.down[a] = self.now + down
        self.pses[s] = self._new_ps(s)

    def spawn(self, index: int, run: int, data: Addr | None = None) -> Process:
        self.next_port += 1
        control = (f"10.0.1.{index}", self.next_port)
        w = Worker(
            JOB, index, FAN_IN, (SWITCH,) * self.shards,
            VTransport(self, data or self.worker_data[index]), window=8, rto=0.05,
            clock=lambda: self.now, control=VTransport(self, control),
            control_addrs=tuple(self.ps_control), key=KEY,
        )  # fmt: skip
        p = Process(w, run, control)
        self.procs.append(p)
        self.ever.append(p)
        return p

    def new_run(self) -> int:
        self.next_run += 1
        return self.next_run

    def begin(self, p: Process) -> None:
        if p not in self.procs:
            return
        w = p.worker
        p.calls.append(Outcome(w.calls, self.now))
        w.begin(tensor(p.run, w.index, w.calls), TIMEOUT)

    # -- the network ---------------------------------------------------------

    def send(self, src: Addr, dst: Addr, data: bytes) -> None:
        if self.rng.random() < self.loss:
            return
        self.order += 1
        at = self.now + self.rng.uniform(1e-4, 1e-3)
        heapq.heappush(self.events, (at, self.order, dst, data, src))

    def at(self, when: float, fn: Callable[[], None]) -> None:
        self.order += 1
        heapq.heappush(self.timers, (when, self.order, fn))

    def _deliver(self, dst: Addr, data: bytes, src: Addr) -> None:
        if dst == SWITCH:
            self._switch(data, src)
        elif self.now >= self.down.get(dst, 0.0):
            if dst[1] != wire.UDP_PORT:
                self.delivered.append((data, src, dst))
            self.inboxes.setdefault(dst, deque()).append((data, src))

    def _switch(self, data: bytes, src: Addr) -> None:
        try:
            pkt = payload.to_model(data)
        except payload.Malformed:
            return
        res = self.switch.process(pkt, int(self.now * 1e6), in_port=self.ports.get(src, 0))
        for out in res.outputs:
            frame = payload.from_model(out.packet)
            for d in destinations(out, self.worker_data, self.ps_data):
                self.send(SWITCH, d, frame)

    def _poll(self, p: Process) -> float | None:
        c = p.calls[-1] if p.busy else None
        try:
            wake = p.worker.poll(self.now)
        except AllreduceError as e:
            assert c is not None, f"an idle worker raised {e}"
            c.end, c.error = self.now, e
            return None
        if c is not None and p.worker.done:
            c.end, c.total = self.now, p.worker.result()
        return wake

    def run(self, until: Callable[[], bool], limit: float) -> None:
        """Advance until ``until()`` or the clock reaches ``limit``."""
        spins = 0
        while not until():
            wakes = [ps.poll(self.now) for ps in self.pses]
            wakes += [w for p in self.procs if (w := self._poll(p)) is not None]
            if until():
                return
            queued = [q[0][0] for q in (self.events, self.timers) if q]
            nxt = min([*wakes, *queued])
            if nxt <= self.now:
                spins += 1
                assert spins < SPIN, f"an agent polls at {self.now} s without end"
            else:
                spins = 0
            self.now = max(self.now, min(nxt, limit))
            if self.now >= limit:
                return
            while self.events and self.events[0][0] <= self.now:
                _, _, dst, data, src = heapq.heappop(self.events)
                self._deliver(dst, data, src)
            while self.timers and self.timers[0][0] <= self.now:
                heapq.heappop(self.timers)[2]()

    # -- attacks -------------------------------------------------------------

    def attack(self, data: bytes, dst: Addr, src: Addr) -> None:
        """Hand ``data`` to whatever listens at ``dst`` now; it must change nothing."""
        self.attacks += 1
        buf = bytearray(data) + bytearray(wire.CONTROL_BYTES + 1 - len(data))
        for s, a in enumerate(self.ps_control):
            if a == dst and self.now >= self.down.get(a, 0.0):
                ps = self.pses[s]
                assert ps.desk is not None
                before = ps_state(ps)
                ps.desk.handle(buf, len(data), src, self.now)
                self.state_changes += ps_state(ps) != before
        for p in self.procs:
            w = p.worker
            if w.agent is not None and p.control == dst:
                before = worker_state(w)
                w.agent.handle(buf, len(data), w.cur, self.now)
                self.state_changes += worker_state(w) != before

    def forged(self, to_ps: bool) -> tuple[bytes, Addr, Addr]:
        """A well-formed message sealed with another key, with a live
        process's nonce and the current session when there is one."""
        r = self.rng
        p = r.choice(self.procs) if self.procs else None
        s = r.randrange(self.shards)
        agent = None if p is None else p.worker.agent
        nonce = r.getrandbits(32) if agent is None else agent.nonce
        index = r.randrange(FAN_IN) if p is None else p.worker.index
        if to_ps:
            kinds = [ControlType.CALL, ControlType.RESUME, ControlType.ALIVE, ControlType.STATUS,
                     ControlType.BYE]  # fmt: skip
            session = self.pses[s].session
            dst, src = self.ps_control[s], ("10.0.9.9", 9)
        else:
            kinds = [ControlType.GO, ControlType.REJECT, ControlType.CHALLENGE, ControlType.REPORT]
            session = self.pses[s].session
            dst = p.control if p is not None else ("10.0.1.0", 1)
            src = self.ps_control[s]
        call = r.randrange(4)
        msg = payload.Control(
            r.choice(kinds), r.randrange(6), JOB, index, 0, nonce, call, 0,
            quant.chunks(size(call)), size(call), FAN_IN, 3, 0, 0, 0, 0, session,
            r.randrange(1, 1 << 20),
        )  # fmt: skip
        return auth.seal(msg, bytes(32)), dst, src

    def recorded(self, mutate: bool) -> tuple[bytes, Addr, Addr] | None:
        """A genuine control datagram delivered before, or a copy of it with
        one to three bytes changed."""
        if not self.delivered:
            return None
        data, src, dst = self.rng.choice(self.delivered)
        if mutate:
            b = bytearray(data)
            for _ in range(self.rng.randint(1, 3)):
                b[self.rng.randrange(len(b))] ^= 1 + self.rng.randrange(255)
            data = bytes(b)
        return data, dst, src


def ps_state(ps: ParameterServer) -> tuple[object, ...]:
    return (
        tuple(b.snapshot() for b in ps.books.values()),
        ps.session,
        tuple(ps.done),
        tuple((k, p.bitmap) for k, p in ps.sums.partials.items()),
    )


def worker_state(w: Worker) -> tuple[object, ...]:
    a, c = w.agent, w.cur
    assert a is not None
    call = None if c is None else dataclasses.astuple(CallView.of(c))
    return (tuple(a.sessions), tuple(a.since), tuple(a.numbers), a.failure is None,
            sorted(a.reports), a.next_call, call)  # fmt: skip


@dataclass
class CallView:
    phase: int
    go: int
    resume: int
    regained: int
    restarted: int
    delivered: int

    @classmethod
    def of(cls, c: object) -> CallView:
        return cls(*(getattr(c, f.name) for f in dataclasses.fields(cls)))
