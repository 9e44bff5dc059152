"""The named schemes: for each, the switch policy, how memory is handed out
and the priority rule.  One registry for the controller's choices, the
run's policies (``make run``) and the simulator's schemes.

A scheme is a name (``Scheme``) and its ``Rules`` (``RULES``).  Code that
acts on a scheme asks its rules (``scheme.memory``, ``scheme.ranking``,
``scheme.policy``), not its name, so a new scheme whose memory and
priority rule exist already is one member and one entry here; a new rule
is a member of ``Memory`` or ``Ranking`` plus the code that carries it out
where its neighbours are carried out (the run: ``runner.scenario`` and
``runner.ctl``; the simulator: ``sim.control`` and ``sim.priority``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from esa.spec import Policy


class Memory(enum.Enum):
    """How the switch's slots are handed out among the jobs."""

    SHARED = "one pool, every job's chunks hashed over it"
    HOMES = "the controller's layout: homes by priority, a job without one hashed; or all hashed"
    FIXED = "SwitchML's partitions of the operator's part size, first come first served"
    BDP_WAIT = "partitions of one bandwidth-delay product; a job that finds none waits"
    BDP_FALLBACK = "partitions of one bandwidth-delay product; a job without one uses its PS"
    EQUAL_SPLIT = "the pool cut equally among the running jobs, recut at every change"
    NONE = "no switch memory: every contribution goes to the PS"
    UNLIMITED = "an unlimited pool: no slot is ever found held"


class Ranking(enum.Enum):
    """What priority each job is admitted at."""

    ONE = "one priority for all: no job preempts another"
    DECLARED = "each job's own: its static number, or the controller's automatic rank with aging"
    SRPT = "every job ranked automatically by remaining volume, strictly"
    SRPT_AGING = "every job ranked automatically by remaining volume, with the controller's aging"


class Place(enum.Flag):
    """Where a scheme can be run."""

    RUN = enum.auto()
    """a ``make run`` policy (the controller, BMv2 or the reference switch)."""
    DEFAULT_RUN = enum.auto()
    """also run when a scenario lists no ``policies``."""
    SIM = enum.auto()
    """a scheme of the simulator's models."""


@dataclass(frozen=True)
class Rules:
    policy: Policy
    memory: Memory
    ranking: Ranking
    places: Place
    bound: bool = False
    """a physical bound beside the schemes, not a scheme to deploy."""


class Scheme(enum.Enum):
    """A named scheme; the value is its name on every command line and file."""

    ATP = "atp"
    STATIC = "static"
    STATIC_BDP = "static-bdp"
    STATIC_FB = "static-fb"
    STATIC_EQUAL = "static-equal"
    ESA_EQUAL = "esa-equal"
    ESA = "esa"
    ESA_SRPT = "esa-srpt"
    ESA_AGING = "esa-aging"
    PS_ONLY = "ps-only"
    IDEAL = "ideal"

    @property
    def rules(self) -> Rules:
        return RULES[self]

    @property
    def policy(self) -> Policy:
        return RULES[self].policy

    @property
    def memory(self) -> Memory:
        return RULES[self].memory

    @property
    def ranking(self) -> Ranking:
        return RULES[self].ranking

    @property
    def ranked(self) -> bool:
        """Jobs run on distinct priority levels, so one may preempt another
        and a progress report may re-rank them."""
        return self.policy is Policy.ESA and self.ranking is not Ranking.ONE

    @property
    def is_static(self) -> bool:
        """The STATIC policy: partitions, or none at all (``PS_ONLY``)."""
        return self.policy is Policy.STATIC


_RUN = Place.RUN | Place.DEFAULT_RUN
_ALL = _RUN | Place.SIM
RULES: dict[Scheme, Rules] = {
    Scheme.ATP: Rules(Policy.ATP, Memory.SHARED, Ranking.DECLARED, _ALL),
    Scheme.STATIC: Rules(Policy.STATIC, Memory.FIXED, Ranking.DECLARED, _RUN),
    Scheme.STATIC_BDP: Rules(Policy.STATIC, Memory.BDP_WAIT, Ranking.DECLARED, Place.SIM),
    Scheme.STATIC_FB: Rules(Policy.STATIC, Memory.BDP_FALLBACK, Ranking.DECLARED, Place.SIM),
    Scheme.STATIC_EQUAL: Rules(Policy.STATIC, Memory.EQUAL_SPLIT, Ranking.DECLARED, _ALL),
    Scheme.ESA_EQUAL: Rules(Policy.ESA, Memory.HOMES, Ranking.ONE, Place.RUN | Place.SIM),
    Scheme.ESA: Rules(Policy.ESA, Memory.HOMES, Ranking.DECLARED, _ALL),
    Scheme.ESA_SRPT: Rules(Policy.ESA, Memory.HOMES, Ranking.SRPT, Place.SIM),
    Scheme.ESA_AGING: Rules(Policy.ESA, Memory.HOMES, Ranking.SRPT_AGING, Place.SIM),
    Scheme.PS_ONLY: Rules(Policy.STATIC, Memory.NONE, Ranking.DECLARED, Place.SIM, bound=True),
    Scheme.IDEAL: Rules(Policy.ESA, Memory.UNLIMITED, Ranking.ONE, Place.SIM, bound=True),
}  # fmt: skip
"""Every scheme's rules.  ESA's memory is the controller's layout
(``controller.world.partition.Layout``): homes by default, as ``make run`` runs
it, or every job hashed (``--layout hashed``), which is what the
simulator's models run unless ``Net.esa_homes`` (docs/simulator.md, "ESA's
homes")."""

RUN_SCHEMES = tuple(s for s in Scheme if Place.RUN in s.rules.places)
DEFAULT_RUN_SCHEMES = tuple(s for s in Scheme if Place.DEFAULT_RUN in s.rules.places)
SIM_SCHEMES = tuple(s for s in Scheme if Place.SIM in s.rules.places)
POLICY_NAMES = tuple(p.name.lower() for p in Policy)
"""The switch policies by the names the controller takes (``esa-ctl policy``)."""
