"""The P4 program's control-plane names, spelled once.

The controller, the tests, the benchmarks and the reference switch name the
program's tables, actions, counters and registers through these constants;
``tests/test_p4names.py`` compiles ``p4src/`` and checks both ways that the
P4Info p4c gives holds exactly these names.
"""

from __future__ import annotations

from esa import spec

POLICY_TABLE = "EsaIngress.admission.policy"
SET_POLICY = "EsaIngress.admission.set_policy"
JOBS_TABLE = "EsaIngress.admission.jobs"
SET_JOB = "EsaIngress.admission.set_job"
UNKNOWN_JOB = "EsaIngress.admission.unknown_job"
CHILDREN_TABLE = "EsaIngress.admission.children"
SET_CHILD = "EsaIngress.admission.set_child"
L2_TABLE = "EsaIngress.forwarding.l2"
TO_PORT = "EsaIngress.forwarding.to_port"
FLOOD = "EsaIngress.forwarding.flood"
L2_DROP = "EsaIngress.forwarding.l2_drop"
PS_TABLE = "EsaIngress.forwarding.ps_route"
SET_PS = "EsaIngress.forwarding.set_ps"
NO_PS_ROUTE = "EsaIngress.forwarding.no_ps_route"
REPLICAS_TABLE = "EsaEgress.rewrite.replicas"
SET_DST = "EsaEgress.rewrite.set_dst"
SET_DST_FROM_SWITCH = "EsaEgress.rewrite.set_dst_from_switch"
NO_ACTION = "NoAction"

JOB_EVENTS = "EsaIngress.accounting.job_events"
DROPS = "EsaIngress.accounting.drops"

POOL = "EsaIngress.pool"
"""The control instance that holds the slot registers."""


def register(name: str) -> str:
    """The full name of slot register ``name`` (``esa.spec.SLOT_REGISTERS``)."""
    return f"{POOL}.{name}"


SLOT_OWNER = register("slot_owner")

TABLES = {
    POLICY_TABLE: (SET_POLICY,),
    JOBS_TABLE: (SET_JOB, UNKNOWN_JOB),
    CHILDREN_TABLE: (SET_CHILD, NO_ACTION),
    L2_TABLE: (TO_PORT, FLOOD, L2_DROP),
    PS_TABLE: (SET_PS, NO_PS_ROUTE),
    REPLICAS_TABLE: (SET_DST, SET_DST_FROM_SWITCH, NO_ACTION),
}
"""Every table the control plane sees, with its actions."""

COUNTERS = {JOB_EVENTS: spec.COUNTER_SIZE, DROPS: len(spec.Drop) + 1}
"""Every counter array with its size."""
