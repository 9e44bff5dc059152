"""The candidate eviction rules of ``sim.evictions`` and its counts."""

from __future__ import annotations

from esa import wire
from esa.model import JobConfig, Packet, SwitchModel, second_hash, slot_hash
from esa.schemes import Scheme
from esa.spec import Event, Policy, Verdict
from esa.wire import PacketType
from sim import evictions
from sim.calibrate import US_SKEW

POOL = 8
LOW, HIGH = 1, 2
PS_PORT = 9


def contrib(job: int, seq: int, worker: int) -> Packet:
    return Packet(PacketType.CONTRIB, job, seq, 1 << worker, (1,) * wire.K, count=1)


def switch(model: type[SwitchModel], low_fan_in: int) -> SwitchModel:
    sw = model(pool_size=POOL, policy=Policy.ESA, stale_us=1000)
    sw.add_job(LOW, JobConfig(low_fan_in, (1 << low_fan_in) - 1, 1, ps_ports=(PS_PORT,)))
    sw.add_job(HIGH, JobConfig(2, 0b11, 5, ps_ports=(PS_PORT,)))
    return sw


def colliding() -> tuple[int, int]:
    """A LOW seq and a HIGH seq of one slot each (their second hash on
    their first, so neither has another slot), the same slot."""
    return next(
        (s, t)
        for s in range(1000)
        for t in range(1000)
        if slot_hash(LOW, s, POOL) == slot_hash(HIGH, t, POOL)
        and second_hash(LOW, s, POOL) == slot_hash(LOW, s, POOL)
        and second_hash(HIGH, t, POOL) == slot_hash(HIGH, t, POOL)
    )


def test_below_half_spares_a_partial_that_holds_half_its_fan_in_and_evicts_one_below() -> None:
    low, high = colliding()
    sw = switch(evictions.BelowHalf, low_fan_in=4)
    sw.process(contrib(LOW, low, 0), 0)
    sw.process(contrib(LOW, low, 1), 1)
    spared = sw.process(contrib(HIGH, high, 0), 2)
    assert spared.verdict is Verdict.FALLBACK
    assert sw.slots[slot_hash(LOW, low, POOL)].count == 2
    sw = switch(evictions.BelowHalf, low_fan_in=4)
    sw.process(contrib(LOW, low, 0), 0)
    assert sw.process(contrib(HIGH, high, 0), 1).verdict is Verdict.PREEMPT
    assert sw.events(LOW)[Event.PREEMPT_SUFFERED] == 1


def test_waited_evicts_only_a_partial_untouched_for_its_bound() -> None:
    low, high = colliding()
    sw = switch(evictions.Waited, low_fan_in=4)
    sw.process(contrib(LOW, low, 0), 100)
    fresh = sw.process(contrib(HIGH, high, 0), 100 + evictions.WAIT_US - 1)
    assert fresh.verdict is Verdict.FALLBACK
    sw = switch(evictions.Waited, low_fan_in=4)
    sw.process(contrib(LOW, low, 0), 100)
    assert sw.process(contrib(HIGH, high, 0), 100 + evictions.WAIT_US).verdict is Verdict.PREEMPT


def test_the_p4_rule_evicts_a_half_full_partial_at_once() -> None:
    low, high = colliding()
    sw = switch(SwitchModel, low_fan_in=4)
    sw.process(contrib(LOW, low, 0), 0)
    sw.process(contrib(LOW, low, 1), 0)
    assert sw.process(contrib(HIGH, high, 0), 0).verdict is Verdict.PREEMPT


def test_counts_add_up_over_a_run() -> None:
    """Every chunk ends in the switch or at a PS; with one priority nobody evicts."""
    for scheme, evicts in ((Scheme.ESA_EQUAL, False), (Scheme.ESA_SRPT, True)):
        sim = evictions.CountingSim(
            list(US_SKEW.jobs), 64, scheme, evictions.NET, model=SwitchModel
        )
        sim.run()
        t = sim.tally()
        chunks = sum(j.spec.chunks * j.spec.iterations for j in sim.jobs.values())
        assert t.completed + t.at_ps == chunks
        assert t.completed == sum(sim.verdicts[(j, Verdict.COMPLETE)] for j in sim.jobs)
        assert (t.evictions > 0) == evicts
        assert t.evictions == sum(sim.verdicts[(j, Verdict.PREEMPT)] for j in sim.jobs)
        assert t.mutual <= t.evictions and t.followers >= 0
