"""Switch-side facts shared by the P4 program, the controller and the model.

Policy codes, counter events, drop reasons and the slot register layout are
defined here once; ``esa.codegen`` writes them into ``p4src/include/codes.p4``
and the tests check the compiled program's registers and counters against
them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from esa import wire
from esa.job import MAX_PS_SHARDS
from esa.ranges import check_range

DEFAULT_POOL_SIZE = 1024
"""Aggregator slots compiled into the switch (``make build POOL=n`` changes it)."""

DEFAULT_STALE_US = 20_000
"""A slot untouched this long (microseconds) may be reclaimed by any job,
whatever it holds: the dead-worker and removed-job timeout."""

DEFAULT_SQUAT_US = 5_000
"""ESA's squat timeout (microseconds): a slot holding an *incomplete* partial
untouched this long may be taken by any other chunk, its partial going to its
PS as on a preemption.  A few round trips of a loaded software switch; 0 turns
the rule off (the default of the ATP and STATIC policies, whose published
designs have no such rule)."""

MAX_STALE_US = 2**48 - 1
"""The longest stale or squat timeout: the switch's 48-bit timestamps."""


def check_stale_us(stale_us: object) -> int:
    """A stale timeout, 1..MAX_STALE_US microseconds; the one check of that
    range, for the command line and the controller."""
    return check_range("stale timeout", stale_us, 1, MAX_STALE_US, "1..2^48-1")


def check_squat_us(squat_us: object) -> int:
    """A squat timeout, 0..MAX_STALE_US microseconds (0: off); the one check
    of that range, for the command line and the controller."""
    return check_range("squat timeout", squat_us, 0, MAX_STALE_US, "0..2^48-1")


class Policy(enum.IntEnum):
    """How slots are handed out; chosen at run time through the ``policy`` table."""

    ESA = 1
    """shared pool, priority preemption, release the moment a sum completes."""
    ATP = 2
    """shared pool, first come first served, release on the PS's result."""
    STATIC = 3
    """each job streams through its own partition (SwitchML)."""


class Event(enum.IntEnum):
    """Per-job switch counters: the ``job_events`` counter index is
    ``job * EVENTS_PER_JOB + event``."""

    AGGREGATED = 1
    """a contribution was added into a slot (including the one that claimed it)."""
    COMPLETED = 2
    """a sum completed in the switch."""
    FALLBACK = 3
    """a contribution went to the PS because no slot could take it."""
    PREEMPT_WON = 4
    """this job's contribution took a slot from a lower-priority job, or
    (rule L) its home's slot from a guest of no higher priority."""
    PREEMPT_SUFFERED = 5
    """this job's partial sum was evicted by a higher-priority job."""
    DUPLICATE = 6
    """a contribution whose worker bit was already in the slot (not added)."""
    STALE_RECLAIMED = 7
    """this job's stale slot was taken over; its partial went to the PS."""
    FLUSHED = 8
    """a retransmission flushed this job's partial sum to the PS."""
    SPOOFED = 9
    """a contribution from a worker outside the job's set was dropped."""
    OVERFLOW = 10
    """a sum left the switch flagged as overflowed."""
    PS_RESULT = 11
    """a PS-completed result passed through to the workers."""
    RELEASED_BY_PS = 12
    """a PS result released a slot that still held this chunk."""
    IDLE_RECLAIMED = 13
    """this job's incomplete partial sat untouched for the squat timeout and
    was taken over; it went to the PS."""
    FOLLOWED = 14
    """a contribution of a chunk whose partial had already left the switch
    unfinished went after it to the PS (also counted as FALLBACK)."""
    LENT = 15
    """rule L: a chunk of this job, its home busy, claimed a slot outside
    its home (its borrowed slot, hashed over the rest of the pool) as a guest."""
    GUEST_EVICTED = 16
    """rule L: this job's partial, a guest in another job's home, was
    evicted by the home's owner (its PREEMPT_WON); it went to the PS."""


EVENTS_PER_JOB = 32
"""Stride of the per-job counter block (room for new events)."""


class Drop(enum.IntEnum):
    """Reasons a packet is dropped; the ``drops`` counter index (0 means "not dropped")."""

    UNKNOWN_JOB = 1
    SPOOFED_WORKER = 2
    BAD_TYPE = 3
    """a packet type the switch does not accept from a host, or a PS result
    that did not come from the job's PS port."""
    NO_PS_ROUTE = 4
    """a packet bound for the PS of a job that has no PS route (removed)."""
    MALFORMED = 5
    """a frame too short for the headers it announces (the parser's error):
    an ESA packet cut inside its header or values, a truncated IPv4 or UDP
    header."""


class Verdict(enum.IntEnum):
    """The rule a packet met in the switch: one row each in docs/dataplane.md.

    The P4 program and ``esa.model`` both end every packet in exactly one
    verdict; the ``account`` table turns it into ``Event`` counts.
    """

    DROP = 0
    """dropped before it reached a slot (see ``Drop``)."""
    CLAIM = 1
    """a free slot was claimed."""
    ADD = 2
    """added into the chunk's slot; the sum is not complete yet."""
    COMPLETE = 3
    """added, and the sum is complete: result out, slot released (ATP: held)."""
    DUPLICATE = 4
    """the worker's bit was already in the slot: not added, dropped."""
    FLUSH = 5
    """a retransmission found its chunk's slot: partial (with it) to the PS, slot released."""
    FALLBACK = 6
    """no slot it may use: the contribution goes to its PS unchanged."""
    PREEMPT = 7
    """ESA: took the slot of a lower-priority job, or (rule L) its home's slot
    from a guest of no higher priority; the evicted partial goes to that
    job's PS."""
    RECLAIM = 8
    """took a stale slot, or an idle one holding an incomplete partial; that
    partial goes to its job's PS."""
    PS_PASS = 9
    """a PS result or pull passed to the workers."""
    PS_RELEASE = 10
    """a PS result passed to the workers and released the chunk's slot."""
    TO_PS = 11
    """a FLOAT packet passed to the job's PS."""
    DOWN = 12
    """a result from the device above (in on the job's up port) passed down
    to this device's workers, child switches and local PS."""
    TRANSIT = 13
    """a packet bound for a PS (a fallback, a partial, a result for the PS)
    came in from another switch of the job and passed on toward its PS."""


class Dest(enum.IntEnum):
    """Where ingress sends an ESA packet (the P4 program's ``dest_t``)."""

    DROP = 0
    """nowhere."""
    PS = 1
    """unicast to the PS of the job in the header (after any rewrite)."""
    ALL = 2
    """multicast: the job's workers and its PS (in a fabric: and the job's
    child switches)."""
    WORKERS = 3
    """multicast: the job's workers (and, in a fabric, its child switches and
    the device above, never back out of the port the packet came in on)."""
    UP = 4
    """unicast to the job's up port: a complete local sum to the device above."""


@dataclass(frozen=True)
class P4Type:
    """A ``typedef`` of the P4 program that is not a header field's."""

    name: str
    bits: int
    doc: str


def header_type(field: str) -> P4Type:
    """The ``typedef`` of an ESA header field (``wire.p4`` declares it)."""
    f = next(f for f in wire.HEADER if f.name == field)
    return P4Type(f"{f.name}_t", f.bits, f.doc)


PRIO_T = P4Type("prio_t", 8, "job priority, 0..MAX_PRIORITY; higher is more urgent")
SLOT_IDX_T = P4Type("slot_idx_t", 32, "index into the slot pool")
CHUNK_KEY_T = P4Type("chunk_key_t", 48, "job (16 bits) ++ seq (32 bits); 0 = no chunk")
USEC_T = P4Type("usec_t", 48, "switch time in microseconds")
SLOT_STATE_T = P4Type("slot_state_t", 8, "SlotState bits")
MCAST_GRP_T = P4Type("mcast_grp_t", 16, "multicast group id")
PORT_T = P4Type("port_t", 9, "a switch port (v1model's egress_spec)")
PS_SHARD_BITS = (MAX_PS_SHARDS - 1).bit_length()
"""The sequence number's low bits that name a chunk's PS shard
(``esa.job.ps_shard``): the ``ps_route`` table matches them ternary."""
SHARD_T = P4Type("shard_t", PS_SHARD_BITS, "a chunk's PS shard: the low bits of its seq")
PS_PORTS_T = P4Type(
    "ps_ports_t",
    PORT_T.bits * MAX_PS_SHARDS,
    f"the PS port of each shard, shard s in bits {PORT_T.bits}s and up",
)
P4_TYPES = (
    PRIO_T,
    SLOT_IDX_T,
    CHUNK_KEY_T,
    USEC_T,
    SLOT_STATE_T,
    MCAST_GRP_T,
    PORT_T,
    SHARD_T,
    PS_PORTS_T,
)
"""Declared in ``codes.p4``; the header fields' types and ``value_t`` are in ``wire.p4``."""
VALUE_T = P4Type(wire.VALUE_TYPE, 32, "one int32 value lane, two's complement")

JOB_TABLE_SIZE = wire.MAX_JOB_ID + 1
"""Entries of the ``jobs`` table: one per job id."""
PS_ROUTE_TABLE_SIZE = JOB_TABLE_SIZE * MAX_PS_SHARDS
"""Entries of the ``ps_route`` table: one per PS shard of every job."""
CHILDREN_TABLE_SIZE = 4096
"""Entries of the ``children`` table: one per (job, port of a child switch
below which the job has workers)."""
L2_TABLE_SIZE = 1024
"""Entries of the ``l2`` table: one per host MAC, plus broadcast."""
REPLICAS_TABLE_SIZE = 4096
"""Entries of the ``replicas`` table: one per job member (workers and PS hosts)."""


@dataclass(frozen=True)
class Register:
    name: str
    type: P4Type
    doc: str

    @property
    def bits(self) -> int:
        return self.type.bits


SLOT_REGISTERS: tuple[Register, ...] = (
    Register("slot_owner", CHUNK_KEY_T, "the chunk holding the slot; 0 = free"),
    Register("slot_bitmap", header_type("bitmap"), "workers summed so far"),
    Register("slot_count", header_type("count"), "contributions summed so far"),
    Register("slot_prio", PRIO_T, "priority of the owner when it claimed the slot"),
    Register("slot_ts", USEC_T, "last touch"),
    Register("slot_state", SLOT_STATE_T, "SlotState bits"),
    Register(
        "slot_gone",
        CHUNK_KEY_T,
        "a job and the highest seq of its chunks that went from this slot to "
        "the PS; their later contributions follow them there (S13)",
    ),
    Register(
        "slot_evicted",
        CHUNK_KEY_T,
        "the same marker for a chunk whose partial another job's contribution "
        "took this slot from (S10, S11, L4), which that job's own markings "
        "never replace (S13)",
    ),
    *(Register(f"slot_v{i}", VALUE_T, f"value lane {i}") for i in range(wire.K)),
)
"""One register array per row, each ``pool size`` entries long."""


class SlotState(enum.IntFlag):
    OVERFLOW = int(wire.Flag.OVERFLOW)
    """a contribution arrived flagged OVERFLOW (same bit as the flag, so the
    switch copies it without a branch)."""
    RESENT = int(wire.Flag.RETX)
    """a contribution flagged RETX joined the sum (same bit as the flag): the
    sum that leaves the slot says so, unless it goes up as a contribution."""
    DONE = 0x10
    """ATP: the sum completed and went to the PS; held until its result returns."""


def default_squat_us(policy: Policy) -> int:
    """The squat timeout the controller writes with ``policy`` unless told otherwise."""
    return DEFAULT_SQUAT_US if policy is Policy.ESA else 0


BCAST_MGID = 1
"""Multicast group that floods L2 broadcast to every host port (rid 0)."""
RID_STRIDE = 64
"""Egress replication ids per job: one per worker, one per PS host."""
PS_MEMBER = wire.MAX_WORKERS
"""Member number in ``rid`` of a job's PS of shard 0; shard ``s`` is ``PS_MEMBER + s``."""
MGID_SHARD_STRIDE = 2 * (wire.MAX_JOB_ID + 1)
"""Group ids per shard: shard 0's groups are those of a job with one PS."""


def mgid_all(job: int, shard: int = 0) -> int:
    """Multicast group of a job's workers and the PS of one of its shards:
    where a sum completed in the switch goes (the chunk's shard)."""
    return 2 * job + shard * MGID_SHARD_STRIDE


def mgid_workers(job: int) -> int:
    """Multicast group of a job's workers (PS results and pulls)."""
    return 2 * job + 1


def rid(job: int, member: int) -> int:
    """Egress replication id of worker ``member`` (0..31) or of the PS of
    shard ``s`` (``PS_MEMBER + s``) of ``job``; the ``replicas`` table
    rewrites each copy to that host's addresses."""
    return job * RID_STRIDE + 1 + member


def pack_ps_ports(ports: Sequence[int]) -> int:
    """The ``ps_ports`` argument of ``set_job``: the PS port of shard ``s`` in
    bits ``PORT_T.bits * s`` and up."""
    return sum(p << (PORT_T.bits * s) for s, p in enumerate(ports))


def unpack_ps_ports(packed: int, shards: int) -> tuple[int, ...]:
    mask = (1 << PORT_T.bits) - 1
    return tuple((packed >> (PORT_T.bits * s)) & mask for s in range(shards))


def owner_key(job: int, seq: int) -> int:
    """The ``slot_owner`` value of a chunk."""
    return (job << 32) | seq


SEQ_MASK = (1 << header_type("seq").bits) - 1

GONE_SPAN = 1 << 16
"""How many seqs a slot's marker (``slot_gone``: a job and a seq) covers:
that seq and those up to ``GONE_SPAN - 1`` behind it, modulo 2^32 (rule
S13, docs/dataplane.md "Gone is gone").  It must exceed the seqs a job has
in flight at one slot (a worker's window is tens to hundreds of chunks) and
stays far below 2^31, so that a marker left by a removed job covers the
chunks of a later job with its id (whose workers start at a random 32-bit
offset, ``esa.wire.epoch_offset``) only with odds ``GONE_SPAN / 2^32``."""


def gone_covers(gone: int, key: int) -> bool:
    """Whether a slot whose marker is ``gone`` counts chunk ``key`` (an
    ``owner_key``) as gone: same job, and its seq at most ``GONE_SPAN - 1``
    behind the marker's in serial-number arithmetic (the seq may wrap)."""
    return gone >> 32 == key >> 32 and (gone - key) & SEQ_MASK < GONE_SPAN


def counter_index(job: int, event: Event) -> int:
    return job * EVENTS_PER_JOB + int(event)


COUNTER_SIZE = (wire.MAX_JOB_ID + 1) * EVENTS_PER_JOB
