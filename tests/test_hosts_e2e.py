"""Workers and PS end to end through the switch model, on a lossy simulated network.

Every result must be bit for bit the dequantised int sum of the workers'
quantised inputs (or, for chunks flagged OVERFLOW, their float32 sum in
worker-bit order), and every chunk must be delivered exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from esa import model, wire
from esa.job import Workers
from esa.spec import Event, Policy
from esa.wire import Flag, PacketType
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from hosts.worker.drivers import IterDriver
from testbed import simnet

SWITCH_ADDR = ("10.0.0.254", wire.UDP_PORT)
Tensors = list[npt.NDArray[np.float32]]


@dataclass
class Cluster:
    net: simnet.SimNet
    switch: model.SwitchModel
    pses: list[ParameterServer]
    """one per shard, each on host ``ps<shard>``."""
    drivers: dict[tuple[int, int], IterDriver]
    data: dict[tuple[int, int], Tensors]

    @property
    def ps(self) -> ParameterServer:
        """The PS of a cluster with one."""
        [ps] = self.pses
        return ps

    def run(self) -> None:
        self.net.run(lambda: all(d.finished for d in self.drivers.values()), max_time=30.0)


def cluster(
    policy: Policy,
    jobs: dict[int, int],
    loss: float = 0.0,
    seed: int = 0,
    iters: int = 3,
    size: int = 600,
    pool: int = 4,
    overflow: bool = False,
    drop: simnet.Drop | None = None,
    shards: int = 1,
) -> Cluster:
    """Jobs (id -> fan-in; priority = id) sharing ``shards`` PS hosts and a
    ``pool``-slot switch."""
    sw = model.SwitchModel(pool_size=pool, policy=policy, stale_us=2000)
    net = simnet.SimNet(sw, loss=loss, seed=seed, drop=drop)
    specs = {j: Workers.of(f) for j, f in jobs.items()}
    ps_names = tuple(f"ps{s}" for s in range(shards))
    pses = [
        ParameterServer(
            net.transport(name), SWITCH_ADDR, specs, stall=0.004, shard=s, shards=shards
        )
        for s, name in enumerate(ps_names)
    ]
    for ps in pses:
        net.add_agent(ps)
    ps_addrs = tuple(net.hosts[name].addr for name in ps_names)
    rng = np.random.default_rng(seed)
    drivers, data = {}, {}
    part = pool // len(jobs)
    for n, (job, fan_in) in enumerate(sorted(jobs.items())):
        names = [f"j{job}w{i}" for i in range(fan_in)]
        transports = [net.transport(name) for name in names]
        net.route(job, ps_names, names)
        sw.add_job(
            job,
            model.JobConfig(
                fan_in, (1 << fan_in) - 1, priority=job,
                ps_ports=tuple(net.port(name) for name in ps_names),
                part_base=n * part if policy is Policy.STATIC else 0,
                part_size=part if policy is Policy.STATIC else 0,
            ),
        )  # fmt: skip
        for i in range(fan_in):
            tensors = [rng.uniform(-1, 1, size).astype(np.float32) for _ in range(iters)]
            if overflow:
                tensors[0][40 + i] = 1.5 + i
            w = Worker(job, i, fan_in, ps_addrs, transports[i], window=8, rto=0.001)
            drivers[job, i] = IterDriver(w, tensors)
            data[job, i] = tensors
            net.add_agent(drivers[job, i])
    return Cluster(net, sw, pses, drivers, data)


def expected(inputs: Tensors, scale: float) -> npt.NDArray[np.float32]:
    qs = [quant.quantise(x, 1.0, scale) for x in inputs]
    total = np.sum([q.values.astype(np.int64) for q in qs], axis=0)
    out = quant.dequantise(total, scale)
    flagged = np.any([q.clipped for q in qs], axis=0)
    floats = np.zeros_like(qs[0].floats)
    for q in qs:
        floats += q.floats
    out[flagged] = floats[flagged]
    return out.ravel()[: inputs[0].size]


JUNK = (
    HostDrop.LENGTH,
    HostDrop.PTYPE,
    HostDrop.JOB,
    HostDrop.BITMAP,
    HostDrop.COUNT,
    HostDrop.FLAGS,
    HostDrop.SOURCE,
)
"""Drop reasons only a datagram no host or switch would send can cause."""


def junk(dropped: dict[str, int]) -> dict[str, int]:
    """The non-zero counts of ``dropped`` under ``JUNK`` reasons."""
    return {r: n for r, n in dropped.items() if r in JUNK and n}


def check_exact(c: Cluster, jobs: dict[int, int], iters: int) -> None:
    for job, fan_in in jobs.items():
        scale = quant.job_scale(1.0, fan_in)
        for it in range(iters):
            want = expected([c.data[job, i][it] for i in range(fan_in)], scale)
            for i in range(fan_in):
                assert np.array_equal(c.drivers[job, i].results[it], want), (job, i, it)
        chunks = iters * quant.chunks(c.data[job, 0][0].size)
        for i in range(fan_in):
            assert c.drivers[job, i].worker.counters.delivered == chunks


JOBS = {1: 3, 2: 2}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", list(Policy))
def test_lossy_shared_pool(policy: Policy, seed: int) -> None:
    c = cluster(policy, JOBS, loss=0.05, seed=seed, overflow=True)
    c.run()
    check_exact(c, JOBS, iters=3)
    ev = {job: c.switch.events(job) for job in JOBS}
    assert all(ev[j][Event.FALLBACK] > 0 for j in JOBS)
    assert sum(ev[j][Event.FLUSHED] for j in JOBS) + c.ps.counters.pulls_sent > 0
    assert c.ps.counters.float_completed == len(JOBS)
    assert junk(c.ps.counters.dropped) == {}
    if policy is Policy.ESA:
        assert ev[1][Event.PREEMPT_SUFFERED] == ev[2][Event.PREEMPT_WON] > 0
    if policy is Policy.ATP:
        assert all(d.worker.counters.results_switch == 0 for d in c.drivers.values())
        assert c.ps.counters.held_answered > 0


def test_no_loss_esa_completes_in_switch() -> None:
    jobs = {1: 3}
    c = cluster(Policy.ESA, jobs, pool=1024, iters=2, size=640)
    c.run()
    check_exact(c, jobs, iters=2)
    chunks = 2 * 20
    for d in c.drivers.values():
        w = d.worker.counters
        assert (w.sent, w.retransmitted, w.results_switch, w.results_ps) == (chunks, 0, chunks, 0)
    p = c.ps.counters
    assert (p.switch_results, p.completed, p.fallbacks, p.pulls_sent) == (chunks, 0, 0, 0)
    assert c.switch.events(1)[Event.COMPLETED] == chunks


def test_no_loss_atp_releases_on_ps_result() -> None:
    jobs = {1: 2}
    c = cluster(Policy.ATP, jobs, pool=1024, iters=1, size=320)
    c.run()
    check_exact(c, jobs, iters=1)
    assert c.ps.counters.held_answered == 10
    assert c.switch.events(1)[Event.RELEASED_BY_PS] == 10
    assert all(d.worker.counters.results_ps == 10 for d in c.drivers.values())
    assert all(not any(d.worker.counters.dropped.values()) for d in c.drivers.values())
    assert all(s.owner == 0 for s in c.switch.slots)


def test_pull_recovers_a_result_lost_to_a_worker_and_the_ps() -> None:
    """w0's first contribution is lost; its RETX completes the sum in the
    switch, but the result copies to w1 and to the PS are lost too.  w0 moves
    on (here: lingers after its last call); w1's RETXs reach the PS alone,
    which pulls w0's contribution."""
    lost: list[tuple[str, str, int]] = []

    def drop(src: str, dst: str, data: bytes) -> bool:
        h = payload.decode_header(data, len(data))
        rule = (
            (src == "j1w0" and h.ptype == PacketType.CONTRIB and not h.flags)
            or (dst in ("j1w1", "ps0") and h.ptype == PacketType.RESULT)
        ) and h.seq == 0
        if rule:
            lost.append((src, dst, h.ptype))
        return rule

    jobs = {1: 2}
    c = cluster(Policy.ESA, jobs, pool=1024, iters=1, size=64, drop=drop)
    c.run()
    check_exact(c, jobs, iters=1)
    assert lost == [
        ("j1w0", "switch", PacketType.CONTRIB),
        ("switch", "j1w1", PacketType.RESULT),
        ("switch", "ps0", PacketType.RESULT),
    ]
    w0, w1 = (c.drivers[1, i].worker.counters for i in range(2))
    assert (w0.retransmitted, w0.pulls_answered, w0.results_switch) == (1, 1, 2)
    assert w0.dropped[HostDrop.DUPLICATE] == 1
    assert (w1.pulls_answered, w1.results_switch, w1.results_ps) == (0, 1, 1)
    p = c.ps.counters
    assert (p.merged, p.completed, p.pulls_sent, p.switch_results) == (2, 1, 1, 1)
    assert p.fallbacks == w1.retransmitted + 1
    assert p.dropped[HostDrop.OVERLAP] == w1.retransmitted - 1


class Forger:
    """An agent that puts one datagram into a host's inbox at time ``at``."""

    def __init__(self, host: simnet.Host, data: bytes, at: float) -> None:
        self.host, self.data, self.at, self.done = host, data, at, False

    def poll(self, now: float) -> float | None:
        if not self.done and now >= self.at:
            self.host.inbox.append((self.data, SWITCH_ADDR))
            self.done = True
        return None if self.done else self.at


def test_a_forged_overflow_neither_stalls_nor_splits_a_sum() -> None:
    """w0 is told chunk 0 overflowed, and the real sum never reaches w0 or
    the PS: w0's FLOAT makes the PS pull both int contributions, whose exact
    sum answers w0; w1 keeps the switch's sum, the same one."""

    def drop(src: str, dst: str, data: bytes) -> bool:
        h = payload.decode_header(data, len(data))
        return dst in ("j1w0", "ps0") and h.ptype == PacketType.RESULT and h.seq == 0

    c = cluster(Policy.ESA, {1: 2}, pool=1024, iters=1, size=64, drop=drop)
    forged = payload.encode(
        payload.Header(PacketType.PS_RESULT, Flag.OVERFLOW, 1, 0, 0b11, 2), [0] * 32
    )
    c.net.add_agent(Forger(c.net.hosts["j1w0"], forged, at=0.0))
    c.run()
    check_exact(c, {1: 2}, iters=1)
    w0 = c.drivers[1, 0].worker.counters
    assert (w0.overflowed, w0.results_float) == (1, 0)
    p = c.ps.counters
    assert (p.float_completed, p.completed, p.pulls_sent) == (0, 1, 2)
    assert p.floats == w0.float_sent and p.dropped[HostDrop.DUPLICATE] == w0.float_sent - 1
    assert c.ps.sums.floats == {} and c.ps.sums.partials == {}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", list(Policy))
def test_a_fifth_of_every_frame_lost(policy: Policy, seed: int) -> None:
    """20 % loss on every link, both ways, two PS shards and an overflowed
    chunk per job: every chunk of every call ends with its exact sum."""
    c = cluster(policy, JOBS, loss=0.2, seed=seed, overflow=True, shards=2)
    c.run()
    check_exact(c, JOBS, iters=3)
    assert c.net.lost > 0
    assert sum(d.worker.counters.retransmitted for d in c.drivers.values()) > 0


# -- two PS shards per job ----------------------------------------------------


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("policy", list(Policy))
def test_two_ps_shards_sum_exactly_under_loss(policy: Policy, seed: int) -> None:
    """Each job's even chunks are finished by ps0, its odd ones by ps1: the
    overflowed chunk 1 of each job is summed in float at ps1, and no PS is
    sent a chunk of the other's shard."""
    c = cluster(policy, JOBS, loss=0.05, seed=seed, overflow=True, shards=2)
    c.run()
    check_exact(c, JOBS, iters=3)
    assert [ps.counters.float_completed for ps in c.pses] == [0, len(JOBS)]
    for s, ps in enumerate(c.pses):
        assert junk(ps.counters.dropped) == {} and ps.counters.dropped[HostDrop.SHARD] == 0
        assert ps.counters.other_shard_results == 0
        assert {seq % 2 for _, seq in ps.done} == {s}


def test_no_loss_atp_releases_on_each_shards_ps_result() -> None:
    """Every held sum goes to its shard's PS, whose acknowledgement the
    switch takes (and no other PS's)."""
    c = cluster(Policy.ATP, {1: 2}, pool=1024, iters=1, size=320, shards=2)
    c.run()
    check_exact(c, {1: 2}, iters=1)
    assert [ps.counters.held_answered for ps in c.pses] == [5, 5]
    assert [sorted(seq for _, seq in ps.done) for ps in c.pses] == [
        [0, 2, 4, 6, 8], [1, 3, 5, 7, 9]
    ]  # fmt: skip
    assert c.switch.events(1)[Event.RELEASED_BY_PS] == 10
    assert sum(c.switch.drops) == 0
