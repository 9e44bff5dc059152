"""Switch-side facts shared by the P4 program, the controller and the model.

Policy codes, counter events, drop reasons and the slot register layout are
defined here once; ``esa.codegen`` writes them into ``p4src/include/codes.p4``
and the tests check the compiled program's registers and counters against
them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from esa import wire

DEFAULT_POOL_SIZE = 1024
"""Aggregator slots compiled into the switch (``make build POOL=n`` changes it)."""

MAX_PRIORITY = 255
"""Priorities run 0..MAX_PRIORITY; a higher number is more urgent."""

DEFAULT_STALE_US = 20_000
"""A slot untouched this long (microseconds) may be reclaimed by any job."""


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
    """this job's contribution took a slot from a lower-priority job."""
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


EVENTS_PER_JOB = 16
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
    """ESA: took the slot of a lower-priority job; the evicted partial goes to that job's PS."""
    RECLAIM = 8
    """took a stale slot; the stale partial goes to its job's PS."""
    PS_PASS = 9
    """a PS result or pull passed to the workers."""
    PS_RELEASE = 10
    """a PS result passed to the workers and released the chunk's slot."""
    TO_PS = 11
    """a FLOAT packet passed to the job's PS."""


@dataclass(frozen=True)
class Register:
    name: str
    bits: int
    doc: str


SLOT_REGISTERS: tuple[Register, ...] = (
    Register("slot_owner", 48, "job (16 bits) and seq (32 bits) holding the slot; 0 = free"),
    Register("slot_bitmap", 32, "workers summed so far"),
    Register("slot_count", 8, "contributions summed so far"),
    Register("slot_prio", 8, "priority of the owner when it claimed the slot"),
    Register("slot_ts", 48, "last touch, switch microseconds"),
    Register("slot_state", 8, "SlotState bits"),
    *(Register(f"slot_v{i}", 32, f"value lane {i} (two's complement)") for i in range(wire.K)),
)
"""One register array per row, each ``pool size`` entries long."""


class SlotState(enum.IntFlag):
    OVERFLOW = int(wire.Flag.OVERFLOW)
    """a contribution arrived flagged OVERFLOW (same bit as the flag, so the
    switch copies it without a branch)."""
    DONE = 0x10
    """ATP: the sum completed and went to the PS; held until its result returns."""


def owner_key(job: int, seq: int) -> int:
    """The ``slot_owner`` value of a chunk."""
    return (job << 32) | seq


def counter_index(job: int, event: Event) -> int:
    return job * EVENTS_PER_JOB + int(event)


COUNTER_SIZE = (wire.MAX_JOB_ID + 1) * EVENTS_PER_JOB
