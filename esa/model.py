"""Executable statement of the switch's rules: what ``p4src/`` does, in Python.

Every packet ends in one ``Verdict``; the P4 program and this model are
checked against each other packet by packet (tests/test_differential.py), and
the cluster simulator runs its switch through this model, so the three can
not drift apart.  docs/dataplane.md is the same rule set as a table.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import NamedTuple

from esa import wire
from esa.job import MAX_PS_SHARDS, PS_COUNTS, ps_shard, valid_shards
from esa.jobrow import JobEntry
from esa.spec import (
    COUNTER_SIZE,
    DEFAULT_POOL_SIZE,
    DEFAULT_STALE_US,
    PS_SHARD_BITS,
    Drop,
    Event,
    Policy,
    SlotState,
    Verdict,
    counter_index,
    default_squat_us,
    gone_covers,
    owner_key,
)
from esa.wire import Flag, PacketType

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


FROM_HOSTS = (PacketType.CONTRIB, PacketType.PS_RESULT, PacketType.PULL, PacketType.FLOAT)
"""Packet types the switch accepts from a host; the others only it sends."""
FROM_PS = (PacketType.PS_RESULT, PacketType.PULL)
"""Packet types accepted only from the job's PS port."""
FROM_SWITCHES = (PacketType.RESULT, PacketType.FALLBACK, PacketType.PARTIAL)
"""Packet types accepted only from another switch of the job: its up port
or a child's port."""
ACCEPTED = frozenset(FROM_HOSTS + FROM_SWITCHES)

RETX, OVERFLOW, HOLD = int(Flag.RETX), int(Flag.OVERFLOW), int(Flag.HOLD)
DONE = int(SlotState.DONE)
"""The flags and the slot state as plain ints: the simulator runs every
packet through these rules, and an ``IntFlag`` operation costs several
times an ``int`` one."""
JOINS = OVERFLOW | int(SlotState.RESENT)
"""the flags of a contribution a slot's state keeps (``SlotState``)."""
CONTRIB, RESULT, PARTIAL = PacketType.CONTRIB, PacketType.RESULT, PacketType.PARTIAL
FALLBACK, PULL = PacketType.FALLBACK, PacketType.PULL
ATP, ESA, STATIC = Policy.ATP, Policy.ESA, Policy.STATIC
AGGREGATED, COMPLETED = Event.AGGREGATED, Event.COMPLETED
FALLBACK_E, FLUSHED_E, PS_RESULT_E = Event.FALLBACK, Event.FLUSHED, Event.PS_RESULT
FALLBACK_V, COMPLETE_V, FLUSH_V = Verdict.FALLBACK, Verdict.COMPLETE, Verdict.FLUSH
PS_PASS_V, PS_RELEASE_V, PREEMPT_V = Verdict.PS_PASS, Verdict.PS_RELEASE, Verdict.PREEMPT
FOLLOWED_E, RELEASED_E = Event.FOLLOWED, Event.RELEASED_BY_PS
"""The enum members the rules read per packet, as module constants (``_E``
an ``Event``, ``_V`` a ``Verdict``, a bare name a ``PacketType``): in Python
3.11 a member read through its class goes through ``EnumType.__getattr__``
and costs ten times a global."""


def sat_add(a: int, b: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, a + b))


ZERO_LANES = [0] * wire.K


def sat_sum(a: list[int] | tuple[int, ...], b: tuple[int, ...]) -> list[int]:
    """``sat_add`` lane by lane.  Adding zeros to lanes within int32 leaves
    them as they are: that case (the simulator's payloads, whose slots hold
    zeros too, compared first as the cheapest) skips the lanes."""
    if (
        not any(b)
        and len(a) == len(b)
        and (a == ZERO_LANES or (a and min(a) >= INT32_MIN and max(a) <= INT32_MAX))
    ):
        return list(a)
    return [sat_add(x, y) for x, y in zip(a, b, strict=True)]


def at_limit(values: list[int] | tuple[int, ...]) -> bool:
    """A lane at the int32 limit, where saturation leaves it."""
    return INT32_MAX in values or INT32_MIN in values


def route_key(job: int, seq: int) -> tuple[int, int]:
    """What the ``ps_route`` table matches of a chunk: its job and the low
    ``PS_SHARD_BITS`` bits of its seq."""
    return job, seq & ((1 << PS_SHARD_BITS) - 1)


def chunk_crc(job: int, seq: int) -> int:
    """CRC-32 of job (16 bits) and seq (32 bits) in network order (BMv2's
    crc32), which the hashed slots take modulo their range."""
    return zlib.crc32(job.to_bytes(2, "big") + seq.to_bytes(4, "big"))


def slot_hash(job: int, seq: int, pool: int) -> int:
    """Slot index under the shared policies: ``chunk_crc`` modulo the pool size."""
    return chunk_crc(job, seq) % pool


def home_second(seq: int, part_base: int, part_size: int) -> int | None:
    """The chunk's second slot h' in its home of ``part_size`` slots from
    ``part_base``: half the home away from h, ``(seq + part_size // 2)``
    summed in 32 bits (as the P4 program sums it) modulo the home; None in a
    home of one slot, where h' would be h."""
    if part_size < 2:
        return None
    return part_base + ((seq + (part_size >> 1)) & 0xFFFFFFFF) % part_size


def second_hash(job: int, seq: int, pool: int) -> int:
    """The second slot of an ESA chunk whose job has no home: the high 16
    bits of ``chunk_crc`` modulo the pool, nearly independent of
    ``slot_hash``'s choice."""
    return (chunk_crc(job, seq) >> 16) % pool


def borrowed_slot(job: int, seq: int, pool: int, part_base: int, part_size: int) -> int | None:
    """Rule L's slot g for a chunk whose home is ``part_size`` slots from
    ``part_base``: ``chunk_crc`` modulo the slots outside the home, counted
    past it, so g never lies in the home; None when the home is the whole
    pool."""
    outside = pool - part_size
    if outside <= 0:
        return None
    g = chunk_crc(job, seq) % outside
    return g if g < part_base else g + part_size


class Packet(NamedTuple):
    """An ESA header and its values, as it enters or leaves the switch.  A
    named tuple, not a frozen dataclass: the simulator builds one per
    packet, and a tuple builds in a sixth of the time."""

    ptype: PacketType
    job: int
    seq: int
    bitmap: int
    values: tuple[int, ...]
    flags: int = 0
    count: int = 0  # type: ignore[assignment]  # the header's field, not tuple.count


class Out(enum.Enum):
    """Where an output packet goes."""

    PS = "ps"
    """unicast to the parameter server of ``packet``'s chunk: the PS of its
    job's shard ``esa.job.ps_shard(packet.seq, shards)``."""
    ALL = "all"
    """multicast to the job's workers, its child switches and the PS of the
    chunk's shard (unless that PS lies above or behind a child)."""
    WORKERS = "workers"
    """multicast to the job's workers, child switches and the device above,
    never back out of the port the packet came in on."""
    UP = "up"
    """unicast to the job's up port: the device above."""


TO_PS, TO_ALL, TO_UP, TO_WORKERS = Out.PS, Out.ALL, Out.UP, Out.WORKERS
"""``Out``'s members as module constants, as ``ATP`` and the others are."""


class Output(NamedTuple):
    to: Out
    packet: Packet


@dataclass(frozen=True)
class JobConfig:
    """One row of the switch's job table (``esa.jobrow``, written by the
    controller) as the rules read it, with the job's child switches."""

    fan_in: int
    worker_mask: int
    priority: int
    ps_ports: tuple[int, ...] = (0,)
    """the port of each shard's PS; 1, 2, 4 or 8 of them."""
    part_base: int = 0
    part_size: int = 0
    up_port: int = 0
    """where a complete local sum goes; 0: the job completes here."""
    children: tuple[tuple[int, int], ...] = ()
    """(port, bitmap) of each child switch: its sum arrives on that port
    with exactly those bits."""

    def __post_init__(self) -> None:
        if not valid_shards(len(self.ps_ports)):
            raise ValueError(f"{len(self.ps_ports)} PS ports: {PS_COUNTS}")

    @classmethod
    def from_entry(cls, entry: JobEntry, children: tuple[tuple[int, int], ...] = ()) -> JobConfig:
        """The job as a switch holds it: its ``jobs`` row, of whose fields the
        model reads all but ``mgid_workers``, and its ``children`` entries."""
        row = {f.name: getattr(entry, f.name) for f in fields(cls) if f.name != "children"}
        return cls(**row, children=children)

    @cached_property
    def child_bitmaps(self) -> dict[int, int]:
        """``children`` by port, built once per row."""
        return dict(self.children)

    def child(self, port: int) -> int | None:
        """The bitmap of the child switch on ``port``, if one is there."""
        return self.child_bitmaps.get(port) if self.children else None

    def ps_port(self, seq: int) -> int:
        """The one port a PS result or pull of chunk ``seq`` is accepted from
        (rule A4): its shard's PS."""
        return self.ps_ports[ps_shard(seq, len(self.ps_ports))]


@dataclass
class Slot:
    owner: int = 0
    bitmap: int = 0
    count: int = 0
    prio: int = 0
    ts: int = 0
    state: int = 0
    gone: int = 0
    """the marker: owner key of the highest-seq chunk of a job that went
    from this slot to the PS by a packet of its own; it covers that job's
    seqs up to ``GONE_SPAN - 1`` behind it (``mark_gone``,
    ``esa.spec.gone_covers``)."""
    evicted: int = 0
    """the victims' marker, kept as ``gone`` is: the chunks whose partial a
    chunk of another job took this slot from (S10, S11, L4;
    ``mark_evicted``), so that the taker's own markings never replace it."""
    values: list[int] = field(default_factory=lambda: [0] * wire.K)


def mark_gone(slot: Slot, key: int) -> None:
    """Chunk ``key`` went from ``slot`` to its PS, so the rest of it must go
    there too (S13): the marker keeps the job's highest such seq, so a
    marker that already covers ``key`` stays; any other is replaced."""
    if not gone_covers(slot.gone, key):
        slot.gone = key


def mark_evicted(slot: Slot, key: int) -> None:
    """``mark_gone`` in the victims' marker: a chunk of another job took
    ``slot`` from chunk ``key``, whose partial went to its PS."""
    if not gone_covers(slot.evicted, key):
        slot.evicted = key


def covered(slot: Slot, key: int) -> bool:
    """Either marker of ``slot`` covers chunk ``key`` (S13, L3)."""
    return gone_covers(slot.gone, key) or gone_covers(slot.evicted, key)


class Result(NamedTuple):
    verdict: Verdict
    outputs: tuple[Output, ...] = ()
    drop: Drop | None = None


QUIET = {v: Result(v) for v in Verdict}
"""Each verdict's result without outputs, built once: a ``Result`` is
immutable, and most packets (an ADD, a CLAIM) leave none."""
ADDED = QUIET[Verdict.ADD]

Vacancy = tuple[Verdict, Event | None]
"""How a contribution takes a slot: its verdict and the holder's event."""
CLAIMED: Vacancy = (Verdict.CLAIM, None)
STALE: Vacancy = (Verdict.RECLAIM, Event.STALE_RECLAIMED)
IDLE: Vacancy = (Verdict.RECLAIM, Event.IDLE_RECLAIMED)
PREEMPTS: Vacancy = (Verdict.PREEMPT, Event.PREEMPT_SUFFERED)
EVICTS_GUEST: Vacancy = (Verdict.PREEMPT, Event.GUEST_EVICTED)


class SwitchModel:
    """The aggregation switch: a slot pool, a job table and counters."""

    def __init__(
        self,
        pool_size: int = DEFAULT_POOL_SIZE,
        policy: Policy = Policy.ESA,
        stale_us: int = DEFAULT_STALE_US,
        squat_us: int | None = None,
    ) -> None:
        """``squat_us`` None: the policy's default (``spec.default_squat_us``)."""
        self.pool_size = pool_size
        self.policy = policy
        self.stale_us = stale_us
        self.squat_us = default_squat_us(policy) if squat_us is None else squat_us
        self.jobs: dict[int, JobConfig] = {}
        self.ps_routes: set[tuple[int, int]] = set()
        """the ``ps_route`` table, as the ``route_key``s it routes."""
        self.slots = [Slot() for _ in range(pool_size)]
        self.job_events = [0] * COUNTER_SIZE
        self.drops = [0] * (len(Drop) + 1)

    def add_job(self, job: int, cfg: JobConfig) -> None:
        """The job's row and a route for each of its shards."""
        self.jobs[job] = cfg
        self.ps_routes |= {route_key(job, low) for low in range(MAX_PS_SHARDS)}

    def remove_job(self, job: int) -> None:
        self.jobs.pop(job, None)
        self.ps_routes = {k for k in self.ps_routes if k[0] != job}

    def events(self, job: int) -> dict[Event, int]:
        return {e: self.job_events[counter_index(job, e)] for e in Event}

    def slot_index(self, job: int, seq: int, cfg: JobConfig) -> int | None:
        """The chunk's slot: its home under ESA and STATIC when the job has
        one, the hash otherwise; None for a STATIC job without a home."""
        if cfg.part_size != 0 and self.policy is not ATP:
            return cfg.part_base + seq % cfg.part_size
        if self.policy is STATIC:
            return None
        return slot_hash(job, seq, self.pool_size)

    def lends(self, cfg: JobConfig) -> bool:
        """Rule L applies to the job: ESA, and the job has a home."""
        return self.policy is ESA and cfg.part_size != 0

    def choices(self, job: int, seq: int, cfg: JobConfig) -> tuple[int, ...]:
        """The chunk's slots in the order a first send tries them: h
        (``slot_index``); under ESA its second slot h' (rule L: in the home,
        ``home_second``; a job without a home: ``second_hash``) unless it is
        h; under rule L then g (``borrowed_slot``).  Empty for a STATIC job
        without a home."""
        h = self.slot_index(job, seq, cfg)
        if h is None:
            return ()
        if self.lends(cfg):
            base, size = cfg.part_base, cfg.part_size
            h2 = home_second(seq, base, size)
            g = borrowed_slot(job, seq, self.pool_size, base, size)
            return tuple(i for i in (h, h2, g) if i is not None)
        if self.policy is ESA:
            h2 = second_hash(job, seq, self.pool_size)
            return (h,) if h2 == h else (h, h2)
        return (h,)

    def holding(self, job: int, seq: int, cfg: JobConfig) -> int | None:
        """The slot the chunk's rules act on when nothing claims one (T2,
        S12): the first of its ``choices`` that holds the chunk, else h."""
        slots = self.choices(job, seq, cfg)
        if not slots:
            return None
        key = owner_key(job, seq)
        for i in slots:
            if self.slots[i].owner == key:
                return i
        return slots[0]

    def process(self, pkt: Packet, now_us: int, in_port: int = 0) -> Result:
        cfg = self.jobs.get(pkt.job)
        if pkt.ptype is CONTRIB and cfg is not None:
            return self._contribution(pkt, cfg, in_port, now_us)  # the common case first
        if pkt.ptype not in ACCEPTED:
            return self._drop(Drop.BAD_TYPE)
        if cfg is None:
            return self._drop(Drop.BAD_TYPE if pkt.ptype in FROM_SWITCHES else Drop.UNKNOWN_JOB)
        if pkt.ptype is PacketType.FLOAT:
            return self._route(Result(Verdict.TO_PS, (Output(TO_PS, pkt),)))
        if pkt.ptype in FROM_SWITCHES:
            from_up = cfg.up_port != 0 and in_port == cfg.up_port
            if cfg.child(in_port) is None and not from_up:
                return self._drop(Drop.BAD_TYPE)
            return self._route(self._passing(pkt, cfg, from_up, now_us))
        if pkt.ptype in FROM_PS:
            return self._from_ps(pkt, cfg, in_port)
        return self._contribution(pkt, cfg, in_port, now_us)

    def _contribution(self, pkt: Packet, cfg: JobConfig, in_port: int, now: int) -> Result:
        """A contribution of a known job: from a worker (one bit of the
        job's mask) or from a child switch (exactly its bitmap)."""
        b = pkt.bitmap
        child = cfg.child(in_port) if cfg.children else None
        if child is not None:
            spoofed = b != child
        else:
            spoofed = b == 0 or bool(b & (b - 1) or b & ~cfg.worker_mask)
        if spoofed:
            self._count(pkt.job, Event.SPOOFED)
            return self._drop(Drop.SPOOFED_WORKER)
        hashed = self.policy is ESA and cfg.part_size == 0
        if hashed:  # slot_hash and second_hash of one CRC
            crc = chunk_crc(pkt.job, pkt.seq)
            idx: int | None = crc % self.pool_size
            h2 = (crc >> 16) % self.pool_size
        else:
            idx = self.slot_index(pkt.job, pkt.seq, cfg)
            if idx is None:
                return self._fallback(pkt)
        if cfg.fan_in == 1 and not pkt.flags & RETX:
            return self._alone(pkt, cfg)
        assert idx is not None
        if hashed and h2 != idx:
            res = self._hashed(pkt, cfg, self.slots[idx], self.slots[h2], now)
        elif self.policy is ESA and not hashed:
            res = self._lending(pkt, cfg, idx, now)
        else:
            res = self._contrib(pkt, cfg, self.slots[idx], now)
        return self._route(res) if res.outputs else res

    def _passing(self, pkt: Packet, cfg: JobConfig, from_up: bool, now: int) -> Result:
        """D1, T1-T3: a packet from another switch of the job."""
        if pkt.ptype is RESULT and from_up and cfg.fan_in and not pkt.flags & HOLD:
            return Result(Verdict.DOWN, (Output(TO_ALL, pkt),))
        passed = Result(Verdict.TRANSIT, (Output(TO_PS, pkt),))
        if pkt.ptype is RESULT or cfg.fan_in == 0:
            return passed
        idx = self.holding(pkt.job, pkt.seq, cfg)
        if idx is None:
            return passed
        slot, key = self.slots[idx], owner_key(pkt.job, pkt.seq)
        if slot.owner != key:
            mark_gone(slot, key)
            return passed
        if slot.state & DONE or slot.bitmap & pkt.bitmap:
            return passed
        summed = sat_sum(slot.values, pkt.values)
        slot.bitmap |= pkt.bitmap
        slot.count += 1
        slot.state |= pkt.flags & JOINS
        self._count(pkt.job, FLUSHED_E)
        out = self._take(slot, PARTIAL, summed)
        mark_gone(slot, key)
        return Result(FLUSH_V, (Output(TO_PS, out),))

    def _contrib(self, pkt: Packet, cfg: JobConfig, slot: Slot, now: int) -> Result:
        key = owner_key(pkt.job, pkt.seq)
        if slot.owner == key:
            return self._own(pkt, cfg, slot, key, now)
        if covered(slot, key):
            self._count(pkt.job, FOLLOWED_E)
            return self._fallback(pkt)
        return self._other(pkt, cfg, slot, key, now)

    def _own(self, pkt: Packet, cfg: JobConfig, slot: Slot, key: int, now: int) -> Result:
        """S2-S7: the slot holds C's chunk."""
        retx = pkt.flags & RETX
        if slot.state & DONE:
            return self._divert(pkt, slot, key)
        if slot.bitmap & pkt.bitmap:
            self._count(pkt.job, Event.DUPLICATE)
            if not retx:
                return QUIET[Verdict.DUPLICATE]
            out = self._take(slot, PARTIAL, slot.values)
            mark_gone(slot, key)
            self._count(pkt.job, FLUSHED_E)
            return Result(FLUSH_V, (Output(TO_PS, out),))
        summed = sat_sum(slot.values, pkt.values)
        slot.bitmap |= pkt.bitmap
        slot.count += 1
        slot.state |= pkt.flags & JOINS
        slot.ts = now
        if slot.count == cfg.fan_in:
            return self._complete(pkt.job, cfg, slot, summed)
        if retx and self.policy is ATP:
            self._count(pkt.job, FLUSHED_E)
            out = self._take(slot, PARTIAL, summed)
            mark_gone(slot, key)
            return Result(FLUSH_V, (Output(TO_PS, out),))
        self._count(pkt.job, AGGREGATED)
        slot.values = summed
        return ADDED

    def _complete(self, job: int, cfg: JobConfig, slot: Slot, summed: list[int]) -> Result:
        """S5: below the top the sum goes up as one contribution; at the top
        the result goes to all (ATP: to the PS, held).  ATP holds the slot
        until the PS's result comes back, ESA and STATIC free it now."""
        self._count(job, AGGREGATED)
        self._count(job, COMPLETED)
        up = cfg.up_port != 0
        ptype = CONTRIB if up else RESULT
        if self.policy is ATP:
            out = self._result(slot, summed, ptype)
            slot.state |= DONE
            if up:
                return Result(COMPLETE_V, (Output(TO_UP, out),))
            out = out._replace(flags=out.flags | HOLD)
            return Result(COMPLETE_V, (Output(TO_PS, out),))
        out = self._take(slot, ptype, summed)
        return Result(COMPLETE_V, (Output(TO_UP if up else TO_ALL, out),))

    def _alone(self, pkt: Packet, cfg: JobConfig) -> Result:
        """S0: the only contributor this device sums (fan-in 1) sends the
        complete sum; it goes on as S5 says without a slot."""
        self._count(pkt.job, AGGREGATED)
        self._count(pkt.job, COMPLETED)
        flags = pkt.flags & OVERFLOW
        if flags or at_limit(pkt.values):
            flags = Flag.OVERFLOW
            self._count(pkt.job, Event.OVERFLOW)
        out = pkt._replace(count=pkt.bitmap.bit_count(), flags=int(flags))
        if cfg.up_port:
            return Result(COMPLETE_V, (Output(TO_UP, out),))
        out = out._replace(ptype=RESULT)
        if self.policy is ATP:
            out = out._replace(flags=out.flags | HOLD)
            return Result(COMPLETE_V, (Output(TO_PS, out),))
        return Result(COMPLETE_V, (Output(TO_ALL, out),))

    def _other(self, pkt: Packet, cfg: JobConfig, slot: Slot, key: int, now: int) -> Result:
        """S8-S11: the slot is free or holds another chunk."""
        retx = pkt.flags & RETX
        vacancy = self._vacancy(slot, now)
        if vacancy is None and self._preempts(cfg, slot, now):
            vacancy = PREEMPTS
        if vacancy is None or retx:
            return self._divert(pkt, slot, key)
        return self._take_over(pkt, cfg, slot, key, now, *vacancy)

    def _hashed(self, pkt: Packet, cfg: JobConfig, first: Slot, second: Slot, now: int) -> Result:
        """S8-S11 over an ESA chunk's two hashed slots h and h' (a job
        without a home): the chunk at either first, then a marker at either
        (S13), before a first send takes h or h' free, stale or idle (S9,
        S10), else preempts a lower priority at h or h' (S11); otherwise it
        falls back marked at h (S8)."""
        key = owner_key(pkt.job, pkt.seq)
        if first.owner == key:
            return self._own(pkt, cfg, first, key, now)
        if second.owner == key:
            return self._own(pkt, cfg, second, key, now)
        if covered(first, key) or covered(second, key):
            self._count(pkt.job, FOLLOWED_E)
            return self._fallback(pkt)
        if pkt.flags & RETX:
            return self._divert(pkt, first, key)
        for slot in (first, second):
            vacancy = self._vacancy(slot, now)
            if vacancy is not None:
                return self._take_over(pkt, cfg, slot, key, now, *vacancy)
        for slot in (first, second):
            if self._preempts(cfg, slot, now):
                return self._take_over(pkt, cfg, slot, key, now, *PREEMPTS)
        return self._divert(pkt, first, key)

    def _lending(self, pkt: Packet, cfg: JobConfig, h: int, now: int) -> Result:
        """Rule L (ESA, a job with a home): a busy home slot h tries the
        chunk's second home slot h' (``home_second``), then borrows its slot
        g outside the home (``borrowed_slot``; none when the home is the
        whole pool) when g is free, stale or idle.  L1-L2 look for the chunk
        at h, h' and g, and L3 for a marker covering it at any of them,
        before anything is claimed, so every piece of a chunk meets the
        first one's slot, or follows it to the PS."""
        key = owner_key(pkt.job, pkt.seq)
        home = self.slots[h]
        if home.owner == key:
            return self._own(pkt, cfg, home, key, now)  # L1
        size = cfg.part_size
        half = None
        if size > 1:  # home_second, inline: every busy home slot reads it
            half = self.slots[cfg.part_base + ((pkt.seq + (size >> 1)) & 0xFFFFFFFF) % size]
        if half is not None and half.owner == key:
            return self._own(pkt, cfg, half, key, now)  # L1 at h'
        g = borrowed_slot(pkt.job, pkt.seq, self.pool_size, cfg.part_base, cfg.part_size)
        guest = None if g is None else self.slots[g]
        if guest is not None and guest.owner == key:
            return self._own(pkt, cfg, guest, key, now)  # L2
        if (
            covered(home, key)
            or (half is not None and covered(half, key))
            or (guest is not None and covered(guest, key))
        ):
            self._count(pkt.job, FOLLOWED_E)  # L3
            return self._fallback(pkt)
        if pkt.flags & RETX:
            return self._divert(pkt, home, key)  # L4, L6: a RETX never starts a slot
        homes = (home,) if half is None else (home, half)
        for slot in homes:
            vacancy = self._vacancy(slot, now)
            if vacancy is not None:
                return self._take_over(pkt, cfg, slot, key, now, *vacancy)  # L4
        for slot in homes:
            if slot.owner >> 32 != pkt.job and slot.prio <= cfg.priority:
                return self._take_over(pkt, cfg, slot, key, now, *EVICTS_GUEST)  # L4
        vacancy = None if guest is None else self._vacancy(guest, now)
        if guest is not None and vacancy is not None:
            self._count(pkt.job, Event.LENT)  # L5: a guest at g
            return self._take_over(pkt, cfg, guest, key, now, *vacancy)
        return self._divert(pkt, home, key)  # L6

    def _preempts(self, cfg: JobConfig, slot: Slot, now: int) -> bool:
        """S11: a first send of C's job takes ``slot``, held and neither
        stale nor idle, from its holder: ESA, and C's job ranks above it.
        (``sim.evictions`` weighs other rules by overriding this.)"""
        return self.policy is ESA and cfg.priority > slot.prio

    def _vacancy(self, slot: Slot, now: int) -> Vacancy | None:
        """How a first send may take ``slot`` without preempting: CLAIM it
        free (S9), RECLAIM it stale or idle (S10); None while it is held."""
        if slot.owner == 0:
            return CLAIMED
        if now - slot.ts > self.stale_us:
            return STALE
        if self.squat_us > 0 and not slot.state & DONE and now - slot.ts > self.squat_us:
            return IDLE
        return None

    def _take_over(
        self,
        pkt: Packet,
        cfg: JobConfig,
        slot: Slot,
        key: int,
        now: int,
        verdict: Verdict,
        victim_event: Event | None,
    ) -> Result:
        """S9-S11, L4-L5: C starts the slot; a holder's partial (unless DONE)
        goes to its PS, its chunk marked: in the victims' marker when C is
        of another job, whose own markings there would replace ``gone``."""
        outputs: tuple[Output, ...] = ()
        if victim_event is not None:
            self._count(slot.owner >> 32, victim_event)
            if not slot.state & DONE:
                outputs = (Output(TO_PS, self._result(slot, slot.values, PARTIAL)),)
                victim = slot.owner
                if victim >> 32 != pkt.job:
                    mark_evicted(slot, victim)
                else:
                    mark_gone(slot, victim)
        if verdict is PREEMPT_V:
            self._count(pkt.job, Event.PREEMPT_WON)
        self._count(pkt.job, AGGREGATED)
        slot.owner, slot.bitmap, slot.count = key, pkt.bitmap, 1
        slot.prio, slot.ts = cfg.priority, now
        slot.state = pkt.flags & JOINS
        slot.values = list(pkt.values)
        return Result(verdict, outputs) if outputs else QUIET[verdict]

    def _from_ps(self, pkt: Packet, cfg: JobConfig, in_port: int) -> Result:
        if in_port != cfg.ps_port(pkt.seq):
            return self._drop(Drop.BAD_TYPE)
        if pkt.ptype is PULL:
            return Result(PS_PASS_V, (Output(TO_WORKERS, pkt),))
        self._count(pkt.job, PS_RESULT_E)
        idx = self.holding(pkt.job, pkt.seq, cfg)
        verdict = PS_PASS_V
        if idx is not None and self.slots[idx].owner == owner_key(pkt.job, pkt.seq):
            self.slots[idx].owner = 0
            self._count(pkt.job, RELEASED_E)
            verdict = PS_RELEASE_V
        return Result(verdict, (Output(TO_WORKERS, pkt),))

    def _result(self, slot: Slot, values: list[int], ptype: PacketType) -> Packet:
        """The packet that carries a slot's sum out of the switch.

        A slot that saw a flagged contribution, or a lane at the int32 limit
        (where saturation leaves it), sends its sum flagged OVERFLOW.
        """
        flags = slot.state & RETX if ptype is not CONTRIB else 0
        if slot.state & OVERFLOW or at_limit(values):
            flags |= OVERFLOW
            self._count(slot.owner >> 32, Event.OVERFLOW)
        return Packet(
            ptype=ptype,
            job=slot.owner >> 32,
            seq=slot.owner & 0xFFFFFFFF,
            bitmap=slot.bitmap,
            count=slot.bitmap.bit_count(),
            flags=int(flags),
            values=tuple(values),
        )

    def _take(self, slot: Slot, ptype: PacketType, values: list[int]) -> Packet:
        """Empty the slot, returning its sum as a ``ptype`` packet."""
        out = self._result(slot, values, ptype)
        slot.owner = slot.bitmap = slot.count = slot.state = 0
        return out

    def _divert(self, pkt: Packet, slot: Slot, key: int) -> Result:
        """S2, S8: C goes to its PS, and so will the rest of its chunk (S13):
        a later contribution that started a slot could never reach the
        fan-in."""
        mark_gone(slot, key)
        return self._fallback(pkt)

    def _fallback(self, pkt: Packet) -> Result:
        self._count(pkt.job, FALLBACK_E)
        out = Packet(FALLBACK, pkt.job, pkt.seq, pkt.bitmap, pkt.values, pkt.flags, pkt.count)
        return self._route(Result(FALLBACK_V, (Output(TO_PS, out),)))

    def _route(self, res: Result) -> Result:
        """Drop outputs to a PS of a chunk that has no PS route (its job was
        removed): the unicast to it and the result to all."""
        outputs = res.outputs
        if not outputs:
            return res
        if len(outputs) == 1:  # nearly every result: test its one output alone
            o = outputs[0]
            if (o.to is not TO_PS and o.to is not TO_ALL) or route_key(
                o.packet.job, o.packet.seq
            ) in self.ps_routes:
                return res
        kept = []
        for o in res.outputs:
            routed = route_key(o.packet.job, o.packet.seq) in self.ps_routes
            if o.to in (TO_PS, TO_ALL) and not routed:
                self.drops[Drop.NO_PS_ROUTE] += 1
            else:
                kept.append(o)
        if len(kept) == len(res.outputs):
            return res
        return res._replace(outputs=tuple(kept))

    def _drop(self, reason: Drop) -> Result:
        self.drops[reason] += 1
        return Result(Verdict.DROP, drop=reason)

    def _count(self, job: int, event: Event) -> None:
        self.job_events[counter_index(job, event)] += 1
