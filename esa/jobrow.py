"""The job table's row, defined once.

The ``jobs`` table (``esa.p4names.JOBS_TABLE``) holds one row per job: the
action data of ``set_job`` (``esa.p4names.SET_JOB``).  ``PARAMS`` are its
parameters in order with their P4 types, so their widths; ``esa.codegen``
writes the P4 action and the metadata fields it fills from them, the
reference switch reads the action data by their names, and
``tests/test_p4names.py`` checks the compiled P4Info against them.

``JobEntry`` is the row as Python values, as the controller writes it and
reads it back: the same fields but one, its ``ps_ports`` a tuple that is
both ``shard_mask`` (its length less one) and the packed ``ps_ports``.
``args`` and ``from_args`` turn it into action data and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from esa import spec


@dataclass(frozen=True)
class Param:
    """One parameter of ``set_job``, and the job metadata field it fills."""

    name: str
    type: spec.P4Type
    doc: str


PARAMS = (
    Param(
        "fan_in",
        spec.header_type("count"),
        "contributions summed on this switch: one per local worker and one per child switch",
    ),
    Param(
        "worker_mask",
        spec.header_type("bitmap"),
        "the job's local workers: a worker's contribution carries one of these bits",
    ),
    Param("priority", spec.PRIO_T, "the job's priority; a higher one preempts under ESA"),
    Param(
        "shard_mask", spec.SHARD_T, "the job's PS hosts less one: a chunk's PS shard is seq & it"
    ),
    Param("ps_ports", spec.PS_PORTS_T, "the PS port of each shard (esa.spec.pack_ps_ports)"),
    Param("mgid_workers", spec.MCAST_GRP_T, "the multicast group of the job's workers"),
    Param("part_base", spec.SLOT_IDX_T, "the first slot of the job's partition"),
    Param("part_size", spec.SLOT_IDX_T, "the slots of the job's partition; 0: none"),
    Param("up_port", spec.PORT_T, "where a complete local sum goes; 0: the job completes here"),
)
"""The parameters of ``set_job``, in order."""

NAMES = tuple(p.name for p in PARAMS)


@dataclass(frozen=True)
class JobEntry:
    """Action data of ``set_job`` (``PARAMS``); ``ps_ports`` is its
    ``shard_mask`` and ``ps_ports``.  ``fan_in`` counts the contributions
    summed on this switch: one per local worker and one per child switch
    (its sum)."""

    fan_in: int
    worker_mask: int
    priority: int
    ps_ports: tuple[int, ...]
    """the port of each shard's PS: a PS result or pull of chunk ``seq`` is
    accepted from ``ps_ports[seq & (len - 1)]`` only (rule A4)."""
    mgid_workers: int
    part_base: int
    part_size: int
    up_port: int = 0
    """where the switch sends a complete local sum (the device above); 0
    where the job completes: its top, or the one switch."""

    def args(self) -> dict[str, int]:
        """The action data, by parameter name."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["shard_mask"] = len(self.ps_ports) - 1
        values["ps_ports"] = spec.pack_ps_ports(self.ps_ports)
        return {name: values[name] for name in NAMES}

    @classmethod
    def from_args(cls, args: Mapping[str, int]) -> JobEntry:
        """The entry whose action data ``args`` is."""
        ports = spec.unpack_ps_ports(args["ps_ports"], args["shard_mask"] + 1)
        values = {f.name: args[f.name] for f in fields(cls) if f.name != "ps_ports"}
        return cls(ps_ports=ports, **values)
