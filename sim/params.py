"""Parameters shared by the packet-level and the fluid simulator.

Every number here has its source in docs/simulator.md ("Parameters").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from controller.world.priority import DEFAULT_AGING_PERIOD_S
from esa import wire
from esa.job import SHARD_COUNTS, valid_shards
from esa.schemes import SIM_SCHEMES, Scheme
from esa.spec import DEFAULT_STALE_US, Policy

WIRE_BYTES = 14 + 20 + 8 + wire.PAYLOAD_BYTES
"""Ethernet + IPv4 + UDP + ESA header + K values: bytes of one packet on a link."""

SQUAT_RTTS = 4
"""Default squat timeout of the ESA policy, in round trips of its own path."""

RTO_RTTS = 8
"""Default initial retransmission timeout of the packet model's workers, in
round trips of the path through the PS."""

JITTER_NS = 1000.0
"""Default ``Net.jitter_ns``: the mean extra delay of one contribution on its
way from a worker's stack to the switch (docs/simulator.md, "Spread")."""

WINDOW_FAN_IN = 8
"""Windows are sized for the spread of a job of this many workers (the
middle of the sweep's 4, 8 and 16)."""


def spread_max_ns(jitter_ns: float, workers: int) -> float:
    """Expected latest of ``workers`` contributions' extra delays, each
    exponential with mean ``jitter_ns``: ``jitter_ns * H(workers)``."""
    return jitter_ns * sum(1.0 / k for k in range(1, workers + 1))


def spread_range_ns(jitter_ns: float, workers: int) -> float:
    """Expected time from the first of ``workers`` such contributions to the
    last (the range of exponentials): ``jitter_ns * H(workers - 1)``, how
    long a chunk's slot holds an incomplete partial beyond any lag."""
    return spread_max_ns(jitter_ns, workers - 1)


BOUNDS = tuple(s for s in SIM_SCHEMES if s.rules.bound)
BASELINES = tuple(s for s in SIM_SCHEMES if s.policy is not Policy.ESA and s not in BOUNDS)
ESA_SCHEMES = tuple(s for s in SIM_SCHEMES if s.policy is Policy.ESA and s not in BOUNDS)
IDEAL_POOL = 1 << 16
"""Slots the packet model gives ``Scheme.IDEAL``."""


@dataclass(frozen=True)
class Net:
    """Links, hosts and switch of the simulated rack."""

    gbps: float = 100.0
    """every link (worker and PS) runs at this rate, full duplex."""
    hop_ns: float = 1000.0
    """one-way latency host <-> switch: propagation, NIC and switch pipeline."""
    ps_pkt_ns: float = 0.0
    """PS service time per packet it receives; 0 means one packet time
    (a PS exactly as fast as its own link)."""
    ps_shards: int = 1
    """PS hosts per job, 1, 2, 4 or 8: chunk ``seq`` belongs to shard
    ``esa.job.ps_shard(seq, ps_shards)``, each shard behind its own link."""
    switch_pkt_ns: float = 0.0
    """service time of the switch per arriving packet: one FIFO server shared
    by every port (BMv2 is a software switch); 0 means infinitely fast."""
    switch_sum_ns: float = 0.0
    """packet model only: service time of a packet the switch sums into a
    slot or reads out of one (``sim.packet.SUMMED``); 0: ``switch_pkt_ns``,
    as for every other packet.  BMv2 sums a packet several times slower
    than it forwards one (``python -m bench.dataplane_rate --only summed``)."""
    window: int = 0
    """outstanding chunks per worker; 0: each scheme's own bandwidth-delay
    product (``bdp_window``)."""
    rto_ns: float | None = None
    """packet model: a worker resends a chunk (RETX) left unresolved for its
    retransmission timeout, adapted as ``hosts.worker.agent`` adapts it
    (``hosts.timing.rto``) from this initial value and floor; None:
    ``RTO_RTTS`` round trips of the path through the PS (``rto_for``); 0:
    never, an idealisation in which a stranded chunk waits for the PS's
    PULL."""
    ps_stall_ns: float = 0.0
    """the PS pulls a chunk it holds incomplete and untouched this long
    (``hosts.ps.parameter_server`` ``stall``); 0 means at once, on its
    first incomplete packet."""
    ps_stall_adapts: bool = False
    """the PS learns its stall from what it observes, as
    ``hosts.ps.parameter_server`` does (``hosts.timing.ps_stall``), from
    ``ps_stall_ns`` (0: one round trip of the path through the PS,
    ``rtt_ns(Scheme.ATP)``)."""
    jitter_ns: float = JITTER_NS
    """every contribution reaches the switch an extra exponential delay of
    this mean, drawn per packet (NIC, PCIe, host stack and queueing); 0 is
    the idealisation of workers in perfect step, where a chunk holds its
    slot for no time."""
    loss: float = 0.0
    """every host link, each direction, loses each packet with this
    probability, drawn per link from the run's seed (the links between
    switches lose none, as in the Mininet run); a loss needs the workers'
    retransmission timeout (``rto_ns`` not 0)."""
    lag_ns: float = 0.0
    """each worker's packets reach the switch a fixed ``U[0, lag_ns)`` later
    (NIC, PCIe and host stack differences), drawn per job and worker."""
    barrier: bool = False
    """the workers of a job start each iteration's stream together: a
    barrier at the PS, one round trip after the last worker is ready."""
    stale_us: int = DEFAULT_STALE_US
    squat_us: int | None = None
    """ESA's squat timeout: an incomplete partial untouched this long may be
    taken by any chunk.  None: ``SQUAT_RTTS`` round trips of the ESA path,
    rounded up to whole microseconds; 0: off.  ATP and STATIC have no such
    rule (``esa.spec.default_squat_us``)."""
    static_fit_window: bool = True
    """STATIC: a worker's window is cut to its partition (SwitchML reuses its
    own slots); False: it keeps ``window`` (the Mininet run's hosts do not
    know their partition, so their chunks collide inside it)."""
    aging_period_s: float = DEFAULT_AGING_PERIOD_S
    """the controller's aging period (``esa-ctl serve --aging-period``)."""
    esa_homes: bool = False
    """under the ESA schemes the controller gives every running job a home,
    its share of the equal split, in priority order (``esa-ctl policy esa``,
    ``controller.world.partition``), and only a job the pool has no home for
    hashes; False: every job hashes over the pool (the paper's ESA, and what
    ``make sim`` judges).  The fluid model solves each home alone
    (``sim.rates.solve_pool``)."""
    esa_home_size: int = 0
    """with ``esa_homes``: the slots of each home, handed to the highest
    ranks while the pool has them (``esa-ctl policy esa --part-size N``);
    0: the equal split."""
    report_progress: bool = True
    """esa-srpt / esa-aging: a job reports its remaining bytes to the
    controller at each iteration boundary (``esa-ctl progress``); False: only
    the size hint given at admission counts, as in the Mininet run."""

    def __post_init__(self) -> None:
        if not valid_shards(self.ps_shards):
            raise ValueError(f"ps_shards must be {SHARD_COUNTS}, got {self.ps_shards}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss must be in [0, 1), got {self.loss}")
        if self.loss > 0 and self.rto_ns == 0:
            raise ValueError("a lossy network needs the workers' retransmission timeout")
        if self.esa_home_size < 0:
            raise ValueError(f"esa_home_size must be >= 0, got {self.esa_home_size}")

    @property
    def pkt_ns(self) -> float:
        """Serialisation time of one packet."""
        return WIRE_BYTES * 8 / self.gbps

    @property
    def ps_ns(self) -> float:
        return self.ps_pkt_ns if self.ps_pkt_ns > 0 else self.pkt_ns

    def path_ns(self, scheme: Scheme) -> float:
        """Round trip of a chunk without contention, lag or spread: worker,
        switch, workers; under ATP through the PS and back before the
        workers hear of it."""
        sw = self.switch_pkt_ns
        if scheme.policy is Policy.ATP:
            return 4 * self.hop_ns + 4 * self.pkt_ns + self.ps_ns + 2 * sw
        return 2 * self.hop_ns + 2 * self.pkt_ns + sw

    def rtt_ns(self, scheme: Scheme) -> float:
        """``path_ns`` waiting for the workers' largest link lag and the
        latest contribution of a job of ``WINDOW_FAN_IN`` workers."""
        return self.path_ns(scheme) + self.lag_ns + spread_max_ns(self.jitter_ns, WINDOW_FAN_IN)

    def rto_for(self) -> float:
        """The workers' initial retransmission timeout in ns (0: none)."""
        if self.rto_ns is not None:
            return self.rto_ns
        return RTO_RTTS * self.rtt_ns(Scheme.ATP)

    def ps_stall_initial(self) -> float:
        """The PS's stall in ns before it has learnt one (``ps_stall_adapts``),
        or its constant stall (0: at once)."""
        if self.ps_stall_adapts and self.ps_stall_ns <= 0:
            return self.rtt_ns(Scheme.ATP)
        return self.ps_stall_ns

    def loss_share(self, workers: int) -> float:
        """The share of a job's chunks that ``loss`` makes wait for a
        resend: one of its ``workers`` contributions or results lost."""
        return -math.expm1(2 * workers * math.log1p(-self.loss))

    @property
    def loss_wait_ns(self) -> float:
        """What a lost contribution or result costs its chunk: the worker's
        retransmission timeout, then the resend's way through the PS."""
        return self.rto_for() + self.path_ns(Scheme.ATP)

    def bdp_window(self, scheme: Scheme) -> int:
        """Packets a worker must have outstanding to stream at line rate
        over the slowest path its chunks take; for ``IDEAL``, a bound, the
        largest of any scheme's, so that no window holds it back where
        another scheme's would not.

        An ESA chunk that falls back or is evicted completes through its PS,
        as every ATP chunk does, so with the barrier ESA's window covers
        that path: a window sized for the switch path alone binds as soon
        as some chunks take the longer one, and with the workers in step
        the larger window costs no switch memory, as a slot is held only
        while a chunk's contributions arrive.  Without the barrier the
        early workers park their whole window in the pool until the last
        one is ready, and there ESA's window stays the switch path's (the
        packet model: at 5 us hops and milliseconds of skew, the PS path's
        window made ESA 44 % slower: docs/simulator.md, "Common to all")."""
        if scheme is Scheme.IDEAL:
            return max(self.bdp_window(s) for s in SIM_SCHEMES if s is not Scheme.IDEAL)
        path = Scheme.ATP if scheme.policy is Policy.ESA and self.barrier else scheme
        return math.ceil(self.rtt_ns(path) / self.pkt_ns)

    @property
    def line_hold(self) -> int:
        """Slots a job of ``WINDOW_FAN_IN`` workers keeps in the pool while
        it streams at line rate under ESA: one per packet time for as long
        as a chunk's contributions take to arrive (the range of their spread
        and the workers' lag)."""
        hold = spread_range_ns(self.jitter_ns, WINDOW_FAN_IN) + self.lag_ns
        return math.ceil(hold / self.pkt_ns)

    def window_for(self, scheme: Scheme) -> int:
        return self.window if self.window > 0 else self.bdp_window(scheme)

    def static_window(
        self,
        scheme: Scheme,
        part_size: int,
        workers: int,
        windows: Callable[[Scheme], int] | None = None,
    ) -> int:
        """STATIC: a worker's window in a partition (see ``static_fit_window``);
        without one, its job's every chunk goes to its PS (``ps_window``).
        ``windows``: each scheme's window on the job's path (default: the one
        switch's, ``window_for``; a fabric's paths differ)."""
        window = windows or self.window_for
        if part_size == 0:
            return self.ps_window(workers, window(Scheme.ATP))
        if not self.static_fit_window:
            return window(scheme)
        return max(1, min(window(scheme), part_size))

    def ps_window(self, workers: int, whole: int | None = None) -> int:
        """A worker's window when its job's every chunk goes to its PS: twice
        its share of the PS path's bandwidth-delay product (its ``workers``
        share the job's ``ps_shards`` links), at most the path's own.  The
        path's whole product for each of them only queues on the PS links:
        16 workers on one PS host queued 16 windows of 464 packets, 109 us,
        past their retransmission timeout (8 round trips, 54 us), and each
        resend added 16 packets to the queue.  ``whole``: the path's own
        (default: the one switch's)."""
        whole = self.window_for(Scheme.ATP) if whole is None else whole
        if self.window > 0:
            return whole
        return min(whole, 2 * math.ceil(whole * self.ps_shards / workers))

    def bdp_partition(self, pool_size: int) -> int:
        """STATIC_BDP, STATIC_FB: slots per partition, one bandwidth-delay product."""
        return min(pool_size, self.bdp_window(Scheme.STATIC_BDP))

    def squat_us_for(self, scheme: Scheme, rtt_ns: float | None = None) -> int:
        """The squat timeout of a switch whose path has round trip ``rtt_ns``
        (default: the one switch's, ``rtt_ns(scheme)``)."""
        if scheme.policy is not Policy.ESA:
            return 0
        if self.squat_us is not None:
            return self.squat_us
        rtt = self.rtt_ns(scheme) if rtt_ns is None else rtt_ns
        return math.ceil(SQUAT_RTTS * rtt / 1000)

    @property
    def barrier_ns(self) -> float:
        """The barrier's round trip: the last worker's message to the PS and
        the PS's release back, through the switch."""
        return 4 * self.hop_ns + 2 * self.pkt_ns + self.ps_ns
