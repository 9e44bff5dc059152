"""Parameters shared by the packet-level and the fluid simulator.

Every number here has its source in docs/simulator.md ("Parameters").
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from controller.priority import DEFAULT_AGING_PERIOD_S
from esa import wire
from esa.spec import DEFAULT_STALE_US, Policy

WIRE_BYTES = 14 + 20 + 8 + wire.PAYLOAD_BYTES
"""Ethernet + IPv4 + UDP + ESA header + K values: bytes of one packet on a link."""


class Scheme(enum.Enum):
    """A switch policy together with the controller's priority rule."""

    ATP = "atp"
    STATIC = "static"
    ESA = "esa"
    """ESA with the static priority given per job (``JobSpec.priority``)."""
    ESA_SRPT = "esa-srpt"
    """ESA, the controller's automatic priority from the remaining volume
    (less remaining = more urgent), without aging."""
    ESA_AGING = "esa-aging"
    """ESA-SRPT plus the controller's aging: one level per
    ``Net.aging_period_s`` since the job was admitted."""

    @property
    def policy(self) -> Policy:
        if self is Scheme.ATP:
            return Policy.ATP
        if self is Scheme.STATIC:
            return Policy.STATIC
        return Policy.ESA


@dataclass(frozen=True)
class Net:
    """Links, hosts and switch of the simulated rack."""

    gbps: float = 100.0
    """every link (worker and PS) runs at this rate, full duplex."""
    hop_ns: float = 1000.0
    """one-way latency host <-> switch: propagation, NIC and switch pipeline."""
    ps_pkt_ns: float = 0.0
    """PS service time per packet it must act on; 0 means one packet time
    (a PS exactly as fast as its own link)."""
    switch_pkt_ns: float = 0.0
    """service time of the switch per arriving packet: one FIFO server shared
    by every port (BMv2 is a software switch); 0 means infinitely fast."""
    window: int = 512
    """outstanding chunks per worker."""
    rto_ns: float = 0.0
    """a worker resends a chunk (RETX) not resolved this long after it sent
    it; 0 means never (no loss in the model, the PS's PULL recovers)."""
    ps_stall_ns: float = 0.0
    """the PS pulls a chunk it holds incomplete and untouched this long
    (``hosts.ps`` ``stall``); 0 means at once, on its first incomplete packet."""
    jitter: float = 0.02
    """per-worker compute time is ``compute_s * (1 + jitter * U[0, 1))``."""
    stale_us: int = DEFAULT_STALE_US
    static_parts: int = 8
    """STATIC: the pool is cut into this many equal partitions, one per job."""
    static_fit_window: bool = True
    """STATIC: a worker's window is cut to its partition (SwitchML reuses its
    own slots); False: it keeps ``window`` (the Mininet run's hosts do not
    know their partition, so their chunks collide inside it)."""
    aging_period_s: float = DEFAULT_AGING_PERIOD_S
    """the controller's aging period (``esa-ctl serve --aging-period``)."""
    tick_s: float = 1.0
    """the controller re-evaluates aged priorities this often
    (``esa-ctl serve --interval``)."""
    report_progress: bool = True
    """esa-srpt / esa-aging: a job reports its remaining bytes to the
    controller at each iteration boundary (``esa-ctl progress``); False: only
    the size hint given at admission counts, as in the Mininet run."""

    @property
    def pkt_ns(self) -> float:
        """Serialisation time of one packet."""
        return WIRE_BYTES * 8 / self.gbps

    @property
    def ps_ns(self) -> float:
        return self.ps_pkt_ns if self.ps_pkt_ns > 0 else self.pkt_ns

    def static_window(self, pool_size: int) -> int:
        """STATIC: a worker's window (see ``static_fit_window``)."""
        if not self.static_fit_window:
            return self.window
        return max(1, min(self.window, pool_size // self.static_parts))


@dataclass(frozen=True)
class JobSpec:
    """One training job: the same description serves both simulators and a
    Mininet run (``sim.scenario.run_scenario``)."""

    job_id: int
    workers: int
    values: int
    """gradient size per iteration, in int32 values (one value per parameter)."""
    iterations: int
    priority: int = 128
    """static priority 0..255 (higher = more urgent), used by ``Scheme.ESA``."""
    arrival_s: float = 0.0
    compute_s: float = 0.0
    """forward + backward time of one iteration on one worker."""
    model: str = ""

    @property
    def chunks(self) -> int:
        """Packets per worker per iteration."""
        return math.ceil(self.values / wire.K)

    def remaining_bytes(self, iters_done: int) -> int:
        """Volume still to aggregate, as a job declares it to the controller
        (4-byte values, like the Mininet run's size hint)."""
        return 4 * self.values * (self.iterations - iters_done)

    @property
    def mask(self) -> int:
        return (1 << self.workers) - 1

    def ideal_iteration_s(self, net: Net) -> float:
        """Compute plus streaming the gradient at line rate, no contention."""
        return self.compute_s + self.chunks * net.pkt_ns * 1e-9
