"""The packet model made faster is the same model: ``bench.packet_rate``'s
case gives, JCT for JCT, what it gave at 287acef, before the event queue
lost its per-chunk timeout events, the links drew their spread in blocks
and ``esa.model`` skipped the lanes of zero payloads, before a packet
to a PS shard became one event, and before ``esa.model`` tested a
contribution first, hashed rule L's borrowed slot only after L1 and read
its enum members as module constants, and before the packets became
named tuples and a PS shard's scans of its stalled chunks and its queued
packets became its own heap and FIFO.  The retransmission timers fire in
this case (under ``esa-aging`` and ``atp``), and so do the PS's pulls, so
their new places in the queue are checked too.  The case gives ESA's jobs homes, so
``esa-aging``'s JCTs are those of rule L (an idle home lent) and of homes
kept in place while their jobs run, which changed what the switch and the
controller do, not how fast the model runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import packet_rate
from esa.schemes import Scheme
from sim.packet import PacketSim

BEFORE = {
    "esa-aging": [
        0.011305138316777484,
        0.01008136297736456,
        0.010517333124586515,
        0.011359833448175325,
    ],
    "atp": [0.011428281374363396, 0.010127067293159993, 0.01059121044112341, 0.01155942335329347],
    "static-bdp": [
        0.011268830465594229,
        0.02128792391022407,
        0.031754827247830915,
        0.04297375694374014,
    ],
}
"""JCTs in seconds per job, measured at 287acef; ``esa-aging``'s where the
controller keeps a running job's home in place when another finishes
(``controller.world.partition.esa_homes``), which changed the layout,
and each chunk has its second slot h' (docs/dataplane.md, "Slot index"),
and a holder that a chunk of another job takes the slot from is marked
in ``slot_evicted`` (docs/dataplane.md, "Gone is gone"), which changed the
rules; ``atp``'s where a worker takes timing samples only from sums of
every worker's first send (``hosts.timing.rto.sums_first_sends``) and
a timer runs for the timeout as it is when it comes due
(``hosts.worker.inflight``), which changed when its timers fire."""


@pytest.mark.parametrize("scheme", sorted(BEFORE))
def test_same_jcts_as_before(scheme: str) -> None:
    runs = packet_rate.measure(scheme)
    assert runs[scheme]["jct"] == BEFORE[scheme]


def test_timers_fire_in_the_case() -> None:
    sim = PacketSim(packet_rate.jobs(), packet_rate.POOL, Scheme.ATP, packet_rate.NET)
    sim.run()
    assert sim.retransmits() == 157


PULLS = {"esa-aging": 5, "atp": 358, "static-bdp": 0}
"""PULLs the case's PS shards send (each scan an event): at 7bf344c,
``esa-aging``'s with the homes kept in place, each chunk's second slot
h' and the victims' marker ``slot_evicted`` (27 PULLs without it);
``atp``'s with samples only from sums of first sends (358 before, 360
after) and timers that run for the timeout as it is when they come due
(358; 323 of its timers fired before, 157 after)."""


@pytest.mark.parametrize("scheme", sorted(PULLS))
def test_scans_pull_as_before_and_nothing_is_left_queued(scheme: str) -> None:
    sim = PacketSim(packet_rate.jobs(), packet_rate.POOL, Scheme(scheme), packet_rate.NET)
    sim.run()
    shards = [ps for job in sim.jobs.values() for ps in job.shards]
    assert sum(ps.pulls for ps in shards) == PULLS[scheme]
    assert all(not ps.scans and not ps.alarms and not ps.fifo for ps in shards)


@given(st.lists(st.floats(0.5, 9.0), min_size=1, max_size=5))
def test_fastest_keeps_each_schemes_least_cpu_time(cpu: list[float]) -> None:
    rounds = [{"a": {"cpu_s": c, "jct": [1.0]}, "b": {"cpu_s": 10 - c, "jct": [2.0]}} for c in cpu]
    best = packet_rate.fastest(rounds)
    assert best["a"]["cpu_s"] == min(cpu)
    assert best["b"]["cpu_s"] == 10 - max(cpu)


def test_fastest_refuses_rounds_whose_jcts_differ() -> None:
    rounds = [{"a": {"cpu_s": 1.0, "jct": [1.0]}}, {"a": {"cpu_s": 2.0, "jct": [1.5]}}]
    with pytest.raises(RuntimeError, match="a: the JCTs differ"):
        packet_rate.fastest(rounds)


def test_the_jct_line_names_the_schemes_that_differ() -> None:
    schemes = ["esa-aging", "atp", "static-bdp"]
    assert packet_rate.jct_line(schemes, []) == "JCTs: identical in every scheme"
    assert packet_rate.jct_line(schemes, ["esa-aging"]) == (
        "JCTs: identical in atp, static-bdp; DIFFERENT in esa-aging"
    )
    assert packet_rate.jct_line(schemes, schemes) == (
        "JCTs: DIFFERENT in esa-aging, atp, static-bdp"
    )
