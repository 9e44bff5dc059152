"""What the PS and the worker count: datagrams by fate, and drops by reason.

Every host reports its counters (``as_dict``) in its CLI's JSON line; a
drop is counted under its ``hosts.net.drops.HostDrop`` reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hosts.net.drops import new_drops


@dataclass
class PSCounters:
    received: int = 0
    switch_results: int = 0
    other_shard_results: int = 0
    """switch sums of chunks another shard owns: not this PS's to record."""
    held_answered: int = 0
    fallbacks: int = 0
    partials: int = 0
    floats: int = 0
    merged: int = 0
    completed: int = 0
    overflowed: int = 0
    float_completed: int = 0
    answered_from_cache: int = 0
    pulls_sent: int = 0
    abandoned: int = 0
    evicted: int = 0
    suppressed: int = 0
    """replies not sent because the job's budget was spent."""
    control_received: int = 0
    calls_agreed: int = 0
    epochs_started: int = 0
    """agreed calls that did not continue the last one (a new run of a job)."""
    gos_sent: int = 0
    rejects_sent: int = 0
    reports_sent: int = 0
    challenges_sent: int = 0
    control_suppressed: int = 0
    """REJECTs and CHALLENGEs not sent: their destination's rate was spent."""
    dropped: dict[str, int] = field(default_factory=new_drops)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class WorkerCounters:
    received: int = 0
    control_received: int = 0
    sent: int = 0
    retransmitted: int = 0
    spurious: int = 0
    """retransmitted chunks whose first transmissions were summed in the switch."""
    float_sent: int = 0
    pulls_answered: int = 0
    results_switch: int = 0
    results_ps: int = 0
    results_float: int = 0
    overflowed: int = 0
    delivered: int = 0
    calls_sent: int = 0
    dropped: dict[str, int] = field(default_factory=new_drops)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
