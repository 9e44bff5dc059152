"""The packet model made faster is the same model: ``bench.packet_rate``'s
case gives, JCT for JCT, what it gave at 287acef, before the event queue
lost its per-chunk timeout events, the links drew their spread in blocks
and ``esa.model`` skipped the lanes of zero payloads, before a packet
to a PS shard became one event, and before ``esa.model`` tested a
contribution first, hashed rule L's borrowed slot only after L1 and read
its enum members as module constants.  The retransmission
timers fire in this case (under ``esa-aging`` and ``atp``), so their new
place in the queue is checked too.  The case gives ESA's jobs homes, so
``esa-aging``'s JCTs are those of rule L (an idle home lent, at 9a6b519),
which changed what the switch does, not how fast the model runs."""

from __future__ import annotations

import pytest

from bench import packet_rate
from esa.schemes import Scheme
from sim.packet import PacketSim

BEFORE = {
    "esa-aging": [
        0.011294600670906922,
        0.010079381414367592,
        0.010541096526163413,
        0.011349619441189618,
    ],
    "atp": [0.011425929049359079, 0.010127067293159993, 0.010591846165601276, 0.011562600208909887],
    "static-bdp": [
        0.011268830465594229,
        0.02128792391022407,
        0.031754827247830915,
        0.04297375694374014,
    ],
}
"""JCTs in seconds per job, measured at 287acef; ``esa-aging``'s at 9a6b519,
where rule L (an idle home lent, its borrowed slot outside the home)
changed the switch's rules."""


@pytest.mark.parametrize("scheme", sorted(BEFORE))
def test_same_jcts_as_before(scheme: str) -> None:
    runs = packet_rate.measure([scheme])
    assert runs[scheme]["jct"] == BEFORE[scheme]


def test_timers_fire_in_the_case() -> None:
    sim = PacketSim(packet_rate.jobs(), packet_rate.POOL, Scheme.ATP, packet_rate.NET)
    sim.run()
    assert sum(w.retransmits for job in sim.jobs.values() for w in job.workers) == 361
