"""Executable statement of the switch's rules: what ``p4src/`` does, in Python.

Every packet ends in one ``Verdict``; the P4 program and this model are
checked against each other packet by packet (tests/test_differential.py), and
the cluster simulator runs its switch through this model, so the three can
not drift apart.  docs/dataplane.md is the same rule set as a table.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field, replace

from esa import wire
from esa.spec import (
    COUNTER_SIZE,
    DEFAULT_POOL_SIZE,
    DEFAULT_STALE_US,
    Drop,
    Event,
    Policy,
    SlotState,
    Verdict,
    counter_index,
    default_squat_us,
    owner_key,
)
from esa.wire import Flag, PacketType

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


FROM_HOSTS = (PacketType.CONTRIB, PacketType.PS_RESULT, PacketType.PULL, PacketType.FLOAT)
"""Packet types the switch accepts from a host; the others only it sends."""
FROM_PS = (PacketType.PS_RESULT, PacketType.PULL)
"""Packet types accepted only from the job's PS port."""


def sat_add(a: int, b: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, a + b))


def slot_hash(job: int, seq: int, pool: int) -> int:
    """Slot index under the shared policies: CRC-32 of job (16 bits) and seq
    (32 bits) in network order, modulo the pool size (BMv2's crc32)."""
    return zlib.crc32(job.to_bytes(2, "big") + seq.to_bytes(4, "big")) % pool


@dataclass(frozen=True)
class Packet:
    """An ESA header and its values, as it enters or leaves the switch."""

    ptype: PacketType
    job: int
    seq: int
    bitmap: int
    values: tuple[int, ...]
    flags: int = 0
    count: int = 0


class Out(enum.Enum):
    """Where an output packet goes."""

    PS = "ps"
    """unicast to the parameter server of ``packet.job``."""
    ALL = "all"
    """multicast to the job's workers and its PS."""
    WORKERS = "workers"
    """multicast to the job's workers."""


@dataclass(frozen=True)
class Output:
    to: Out
    packet: Packet


@dataclass(frozen=True)
class JobConfig:
    """One row of the switch's job table (written by the controller)."""

    fan_in: int
    worker_mask: int
    priority: int
    ps_port: int = 0
    part_base: int = 0
    part_size: int = 0


@dataclass
class Slot:
    owner: int = 0
    bitmap: int = 0
    count: int = 0
    prio: int = 0
    ts: int = 0
    state: int = 0
    gone: int = 0
    """owner key of the last chunk whose partial left this slot unfinished."""
    values: list[int] = field(default_factory=lambda: [0] * wire.K)


@dataclass(frozen=True)
class Result:
    verdict: Verdict
    outputs: tuple[Output, ...] = ()
    drop: Drop | None = None


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
        self.ps_routes: set[int] = set()
        self.slots = [Slot() for _ in range(pool_size)]
        self.job_events = [0] * COUNTER_SIZE
        self.drops = [0] * (len(Drop) + 1)

    def add_job(self, job: int, cfg: JobConfig) -> None:
        self.jobs[job] = cfg
        self.ps_routes.add(job)

    def remove_job(self, job: int) -> None:
        self.jobs.pop(job, None)
        self.ps_routes.discard(job)

    def events(self, job: int) -> dict[Event, int]:
        return {e: self.job_events[counter_index(job, e)] for e in Event}

    def slot_index(self, job: int, seq: int, cfg: JobConfig) -> int | None:
        if self.policy is Policy.STATIC:
            if cfg.part_size == 0:
                return None
            return cfg.part_base + seq % cfg.part_size
        return slot_hash(job, seq, self.pool_size)

    def process(self, pkt: Packet, now_us: int, in_port: int = 0) -> Result:
        cfg = self.jobs.get(pkt.job)
        if pkt.ptype not in FROM_HOSTS:
            return self._drop(Drop.BAD_TYPE)
        if cfg is None:
            return self._drop(Drop.UNKNOWN_JOB)
        if pkt.ptype is PacketType.FLOAT:
            return self._route(Result(Verdict.TO_PS, (Output(Out.PS, pkt),)))
        if pkt.ptype in FROM_PS:
            return self._from_ps(pkt, cfg, in_port)
        b = pkt.bitmap
        if b == 0 or b & (b - 1) or b & ~cfg.worker_mask:
            self._count(pkt.job, Event.SPOOFED)
            return self._drop(Drop.SPOOFED_WORKER)
        idx = self.slot_index(pkt.job, pkt.seq, cfg)
        if idx is None:
            return self._fallback(pkt)
        return self._route(self._contrib(pkt, cfg, self.slots[idx], now_us))

    def _contrib(self, pkt: Packet, cfg: JobConfig, slot: Slot, now: int) -> Result:
        key = owner_key(pkt.job, pkt.seq)
        if slot.owner == key:
            return self._own(pkt, cfg, slot, key, now)
        if slot.gone == key:
            self._count(pkt.job, Event.FOLLOWED)
            return self._fallback(pkt)
        return self._other(pkt, cfg, slot, key, now)

    def _own(self, pkt: Packet, cfg: JobConfig, slot: Slot, key: int, now: int) -> Result:
        """S2-S7: the slot holds C's chunk."""
        retx = bool(pkt.flags & Flag.RETX)
        if slot.state & SlotState.DONE:
            return self._fallback(pkt)
        if slot.bitmap & pkt.bitmap:
            self._count(pkt.job, Event.DUPLICATE)
            if not retx:
                return Result(Verdict.DUPLICATE)
            out = self._take(slot, PacketType.PARTIAL, slot.values)
            slot.gone = key
            self._count(pkt.job, Event.FLUSHED)
            return Result(Verdict.FLUSH, (Output(Out.PS, out),))
        summed = [sat_add(a, b) for a, b in zip(slot.values, pkt.values, strict=True)]
        slot.bitmap |= pkt.bitmap
        slot.count += 1
        slot.state |= SlotState.OVERFLOW if pkt.flags & Flag.OVERFLOW else 0
        slot.ts = now
        if slot.count == cfg.fan_in:
            self._count(pkt.job, Event.AGGREGATED)
            self._count(pkt.job, Event.COMPLETED)
            if self.policy is Policy.ATP:
                out = self._result(slot, summed, PacketType.RESULT)
                out = replace(out, flags=out.flags | Flag.HOLD)
                slot.state |= SlotState.DONE
                return Result(Verdict.COMPLETE, (Output(Out.PS, out),))
            out = self._take(slot, PacketType.RESULT, summed)
            return Result(Verdict.COMPLETE, (Output(Out.ALL, out),))
        if retx:
            self._count(pkt.job, Event.FLUSHED)
            out = self._take(slot, PacketType.PARTIAL, summed)
            slot.gone = key
            return Result(Verdict.FLUSH, (Output(Out.PS, out),))
        self._count(pkt.job, Event.AGGREGATED)
        slot.values = summed
        return Result(Verdict.ADD)

    def _other(self, pkt: Packet, cfg: JobConfig, slot: Slot, key: int, now: int) -> Result:
        """S8-S11: the slot is free or holds another chunk."""
        retx = bool(pkt.flags & Flag.RETX)
        held = slot.owner != 0
        stale = held and now - slot.ts > self.stale_us
        idle = (
            held
            and self.squat_us > 0
            and not slot.state & SlotState.DONE
            and now - slot.ts > self.squat_us
        )
        if not held or stale or idle:
            if retx:
                return self._divert(pkt, slot, key)
            verdict, victim_event = Verdict.CLAIM, None
            if stale:
                verdict, victim_event = Verdict.RECLAIM, Event.STALE_RECLAIMED
            elif idle:
                verdict, victim_event = Verdict.RECLAIM, Event.IDLE_RECLAIMED
        elif self.policy is Policy.ESA and not retx and cfg.priority > slot.prio:
            verdict, victim_event = Verdict.PREEMPT, Event.PREEMPT_SUFFERED
        else:
            return self._divert(pkt, slot, key)
        outputs: tuple[Output, ...] = ()
        if victim_event is not None:
            self._count(slot.owner >> 32, victim_event)
            if not slot.state & SlotState.DONE:
                outputs = (Output(Out.PS, self._result(slot, slot.values, PacketType.PARTIAL)),)
                slot.gone = slot.owner
        if verdict is Verdict.PREEMPT:
            self._count(pkt.job, Event.PREEMPT_WON)
        self._count(pkt.job, Event.AGGREGATED)
        slot.owner, slot.bitmap, slot.count = key, pkt.bitmap, 1
        slot.prio, slot.ts = cfg.priority, now
        slot.state = SlotState.OVERFLOW if pkt.flags & Flag.OVERFLOW else 0
        slot.values = list(pkt.values)
        return Result(verdict, outputs)

    def _from_ps(self, pkt: Packet, cfg: JobConfig, in_port: int) -> Result:
        if in_port != cfg.ps_port:
            return self._drop(Drop.BAD_TYPE)
        if pkt.ptype is PacketType.PULL:
            return Result(Verdict.PS_PASS, (Output(Out.WORKERS, pkt),))
        self._count(pkt.job, Event.PS_RESULT)
        idx = self.slot_index(pkt.job, pkt.seq, cfg)
        verdict = Verdict.PS_PASS
        if idx is not None and self.slots[idx].owner == owner_key(pkt.job, pkt.seq):
            self.slots[idx].owner = 0
            self._count(pkt.job, Event.RELEASED_BY_PS)
            verdict = Verdict.PS_RELEASE
        return Result(verdict, (Output(Out.WORKERS, pkt),))

    def _result(self, slot: Slot, values: list[int], ptype: PacketType) -> Packet:
        """The packet that carries a slot's sum out of the switch.

        A slot that saw a flagged contribution, or a lane at the int32 limit
        (where saturation leaves it), sends its sum flagged OVERFLOW.
        """
        flags = 0
        if slot.state & SlotState.OVERFLOW or any(v in (INT32_MAX, INT32_MIN) for v in values):
            flags = Flag.OVERFLOW
            self._count(slot.owner >> 32, Event.OVERFLOW)
        return Packet(
            ptype=ptype,
            job=slot.owner >> 32,
            seq=slot.owner & 0xFFFFFFFF,
            bitmap=slot.bitmap,
            count=slot.count,
            flags=int(flags),
            values=tuple(values),
        )

    def _take(self, slot: Slot, ptype: PacketType, values: list[int]) -> Packet:
        """Empty the slot, returning its sum as a ``ptype`` packet."""
        out = self._result(slot, values, ptype)
        slot.owner = slot.bitmap = slot.count = slot.state = 0
        return out

    def _divert(self, pkt: Packet, slot: Slot, key: int) -> Result:
        """S8: C goes to its PS, and so will the rest of its chunk (S13): a
        later contribution that started a slot could never reach the fan-in."""
        slot.gone = key
        return self._fallback(pkt)

    def _fallback(self, pkt: Packet) -> Result:
        self._count(pkt.job, Event.FALLBACK)
        out = replace(pkt, ptype=PacketType.FALLBACK)
        return self._route(Result(Verdict.FALLBACK, (Output(Out.PS, out),)))

    def _route(self, res: Result) -> Result:
        """Drop PS-bound outputs of jobs that have no PS route any more."""
        kept = []
        for o in res.outputs:
            if o.to is Out.PS and o.packet.job not in self.ps_routes:
                self.drops[Drop.NO_PS_ROUTE] += 1
            else:
                kept.append(o)
        return replace(res, outputs=tuple(kept))

    def _drop(self, reason: Drop) -> Result:
        self.drops[reason] += 1
        return Result(Verdict.DROP, drop=reason)

    def _count(self, job: int, event: Event) -> None:
        self.job_events[counter_index(job, event)] += 1
