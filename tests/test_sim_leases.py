"""Wire ids leased to simulated jobs (sim.leases): any number of jobs, the
switch only ever sees 1..MAX_JOB_ID, and a job waits when all are held."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import sim_scale
from esa import wire
from esa.job import JobSpec
from esa.model import Packet, Result
from esa.schemes import Scheme
from sim import fluid, packet
from sim.control import Partitions
from sim.leases import Leases
from sim.params import Net
from sim.rates import Flow
from sim.sweep import REGIMES
from sim.workload import WorkloadSpec, make_jobs

MODERATE = next(p for p in REGIMES if p.name == "moderate")

BEFORE_LEASES = {
    Scheme.ESA: {
        1: 1.3071608971483066,
        2: 3.7927446465047163,
        3: 5.351417349851759,
        4: 1.9826089665562305,
        5: 1.4905963171594436,
        6: 1.7984534700522845,
        7: 2.0417609970794417,
        8: 6.79499108134025,
    },
    Scheme.STATIC_BDP: {
        1: 1.307160134520934,
        2: 3.792627621431035,
        3: 5.378797186375529,
        4: 1.9824078245040075,
        5: 2.979913839568673,
        6: 3.043535549657844,
        7: 4.183030438796358,
        8: 9.11903449107429,
    },
}
"""JCTs of ``make_jobs(WorkloadSpec(jobs=8, load=4.0), moderate net, 3)``
at the moderate point, seed 3, computed before jobs leased wire ids (ESA's
again once its iterations waited for their stranded chunks, and once a
slot's marker kept a job's highest seq gone, so that only the other jobs'
markings strand a chunk, and once an evicted chunk's marker, kept apart
in ``slot_evicted``, was lost only to the others' evictions, and once
the sweep's PS learnt its stall as the hosts' does, from one round trip
of its path, where it pulled at once: a stranded chunk waits that much
longer for its pull; STATIC_BDP's once a window of its partition let a
chunk out onto a slot its job's late chunk still held, ``sim.rates.static_lap``)."""


def test_leases_hand_out_the_lowest_free_id_and_queue_the_rest() -> None:
    leases = Leases(2)
    assert [leases.lease(j) for j in (10, 20, 30, 40)] == [1, 2, None, None]
    assert leases.release(10) == 30
    assert leases.held == {20: 2, 30: 1}
    assert leases.release(20) == 40
    assert leases.release(30) is None
    assert leases.release(40) is None
    assert leases.lease(50) == 1


def test_leases_refuse_a_double_lease_and_a_stray_release() -> None:
    leases = Leases(1)
    leases.lease(7)
    with pytest.raises(ValueError, match=r"^job 7 already holds wire id 1$"):
        leases.lease(7)
    with pytest.raises(ValueError, match=r"^job 8 holds no wire id$"):
        leases.release(8)
    with pytest.raises(ValueError, match=r"^there must be at least one wire id to lease, got 0$"):
        Leases(0)


@given(
    st.integers(1, 5),
    st.lists(st.one_of(st.none(), st.integers(0, 100)), max_size=80),
)
def test_leases_keep_ids_unique_lowest_first_and_waiters_in_order(
    n: int, steps: list[int | None]
) -> None:
    """Each step: a new job arrives (None) or the holder at that index
    (modulo) finishes."""
    leases = Leases(n)
    holders: dict[int, int] = {}
    waiting: deque[int] = deque()
    arrived = done = 0
    for step in steps:
        if step is None or not holders:
            arrived += 1
            got = leases.lease(arrived)
            free = sorted(set(range(1, n + 1)) - set(holders.values()))
            if waiting or not free:
                assert got is None
                waiting.append(arrived)
            else:
                assert got == free[0]
                holders[arrived] = got
        else:
            job = sorted(holders)[step % len(holders)]
            freed = holders.pop(job)
            done += 1
            nxt = leases.release(job)
            if waiting:
                assert nxt == waiting.popleft()
                holders[nxt] = freed
            else:
                assert nxt is None
        assert leases.held == holders
        assert list(leases.waiting) == list(waiting)
        assert len(set(holders.values())) == len(holders) <= n
        assert len(holders) + len(waiting) + done == arrived


def test_a_job_takes_its_wire_id_before_it_queues_for_a_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "MAX_JOB_ID", 2)
    parts = Partitions(Scheme.STATIC_BDP, 100, 100)
    assert [parts.request(j) for j in (500, 600, 700)] == [True, False, False]
    assert list(parts.waiting) == [600] and list(parts.leases.waiting) == [700]
    assert parts.release(500) == [600]
    assert list(parts.waiting) == [700] and parts.wire(700) == 1
    assert parts.release(600) == [700]
    assert parts.running == [700]


def test_jobspec_takes_any_positive_int_as_its_identity() -> None:
    assert JobSpec(10_000, 2, 1, 1).job == 10_000
    for bad in (0, -3, True, 1.5):
        with pytest.raises(
            ValueError, match=f"^{re.escape(f'job must be an int >= 1, got {bad!r}')}$"
        ):
            JobSpec(bad, 2, 1, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", list(BEFORE_LEASES))
def test_fluid_runs_under_the_id_range_give_what_they_gave_before_leases(scheme: Scheme) -> None:
    jobs = make_jobs(WorkloadSpec(jobs=8, load=4.0), MODERATE.net(), 3)
    jct = fluid.simulate(jobs, MODERATE.pool, scheme, MODERATE.net(), 3)
    assert jct == BEFORE_LEASES[scheme]


def burst(ids: tuple[int, ...]) -> list[JobSpec]:
    """Jobs arriving together, the first the longest, as ``ids`` number them."""
    return [
        JobSpec(jid, 4, 200_000, 12 - 2 * i, priority=1, compute_s=0.01)
        for i, jid in enumerate(ids)
    ]


def test_a_fluid_job_that_finds_every_id_held_waits_for_the_first_freed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net, jobs = Net(), burst((101, 102, 103, 104, 105))
    unleased = fluid.simulate(jobs, 1024, Scheme.ESA, net)
    monkeypatch.setattr(wire, "MAX_JOB_ID", 5)
    assert fluid.simulate(jobs, 1024, Scheme.ESA, net) == unleased
    monkeypatch.setattr(wire, "MAX_JOB_ID", 3)
    held: list[dict[int, int]] = []

    def observe(now: float, flows: list[Flow]) -> None:
        held.append(dict(sim.parts.leases.held))
        assert set(sim.parts.running) == set(held[-1])

    sim = fluid.FluidSim(jobs, 1024, Scheme.ESA, net, observer=observe)
    jct = sim.run()
    assert set(jct) == {101, 102, 103, 104, 105}
    done = sorted((101, 102, 103), key=lambda j: sim.jobs[j].finish)
    assert done == [103, 102, 101]
    assert [sim.jobs[j].admitted_at for j in (101, 102, 103)] == [0.0, 0.0, 0.0]
    assert sim.jobs[104].admitted_at == sim.jobs[103].finish
    assert sim.jobs[105].admitted_at == sim.jobs[102].finish
    assert held[0] == {101: 1, 102: 2, 103: 3}
    assert {101: 1, 102: 2, 104: 3} in held
    assert {101: 1, 104: 3, 105: 2} in held
    assert all(len(set(h.values())) == len(h) for h in held)


class Watched(packet.PacketSim):
    """The packet model, noting every job id its switch model is given."""

    seen: set[int]

    def _process(self, pkt: Packet, in_port: int) -> Result:
        self.seen.add(pkt.job)
        self.seen.update(self.switch.jobs)
        return super()._process(pkt, in_port)


def test_the_packet_models_switch_sees_only_leased_wire_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "MAX_JOB_ID", 2)
    jobs = [replace(j, values=8_000) for j in burst((1000, 2000, 3000))]
    sim = Watched(jobs, 256, Scheme.ESA, Net())
    sim.seen = set()
    jct = sim.run()
    assert set(jct) == {1000, 2000, 3000}
    assert sim.seen == {1, 2}
    assert sim.jobs[3000].wire == sim.jobs[2000].wire == 2
    assert sim.jobs[3000].admitted_at == sim.jobs[2000].finish
    assert {j for j, _ in sim.verdicts} == {1000, 2000, 3000}


def test_the_scale_bench_times_each_size_and_shows_a_burst_waiting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wire, "MAX_JOB_ID", 2)
    assert sim_scale.main(["--sizes", "8", "--schemes", "atp", "esa", "--burst", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["jobs", "at", "once", "atp", "esa"]
    assert re.fullmatch(r" +8 +\d+\.\d +\d+\.\d\d s +\d+\.\d\d s", lines[1])
    assert re.fullmatch(
        r"5 jobs at once under atp: 3 waited for a wire id \(of 2\), at most 2 held one at a "
        r"time, mean wait \d+\.\d\d s \(\d+ CPU s to run\)",
        lines[3],
    )
