"""Faults a run can inject, as ``--fault`` options: what they are and their syntax.

``bmv2-restart[=SWITCH]@T``  kill a switch (SIGKILL; BMv2 or the reference
                             switch) T seconds into the scheme's run and start
                             it again, empty; the controller must push the
                             pipeline and every entry back.  Without a name:
                             the only switch, or the fabric's first ToR.
``controller-restart@T``     kill the controller (SIGKILL) and start it again on
                             the same state file; it must reconcile, not rewrite.
``kill-worker=JOB:IDX@T``    kill worker IDX of job JOB for good; its peers must
                             give up at their allreduce deadline and the run must
                             report the job failed, naming why.

T counts from the moment the first job of the scheme's run starts.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class FaultKind(enum.Enum):
    BMV2_RESTART = "bmv2-restart"
    CONTROLLER_RESTART = "controller-restart"
    KILL_WORKER = "kill-worker"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    at_s: float
    job: int = 0
    """kill-worker only: the job and the index of the worker it kills."""
    index: int = 0
    switch: str = ""
    """bmv2-restart only: the switch it kills ("": the run's default switch)."""

    def __str__(self) -> str:
        target = f"={self.switch}" if self.switch else ""
        if self.kind is FaultKind.KILL_WORKER:
            target = f"={self.job}:{self.index}"
        return f"{self.kind.value}{target}@{self.at_s:g}"


_SYNTAX = re.compile(
    r"(?P<kind>[a-z0-9-]+)"
    r"(?:=(?:(?P<job>\d+):(?P<index>\d+)|(?P<switch>[a-z][a-z0-9]*[0-9])))?"
    r"@(?P<at>[0-9.]+)"
)
USAGE = "bmv2-restart[=SWITCH]@T, controller-restart@T or kill-worker=JOB:IDX@T (T: seconds)"


def parse_fault(text: str) -> Fault:
    """One ``--fault`` value; ValueError names the accepted forms."""
    m = _SYNTAX.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"fault {text!r}: expected {USAGE}")
    try:
        kind = FaultKind(m["kind"])
    except ValueError:
        raise ValueError(f"fault {text!r}: unknown kind {m['kind']!r}; expected {USAGE}") from None
    try:
        at = float(m["at"])
    except ValueError:
        raise ValueError(f"fault {text!r}: {m['at']!r} is not a number of seconds") from None
    if (m["job"] is not None) != (kind is FaultKind.KILL_WORKER):
        raise ValueError(f"fault {text!r}: only kill-worker names a worker (=JOB:IDX)")
    if m["switch"] is not None and kind is not FaultKind.BMV2_RESTART:
        raise ValueError(f"fault {text!r}: only bmv2-restart names a switch (=SWITCH)")
    if kind is FaultKind.KILL_WORKER:
        return Fault(kind, at, int(m["job"]), int(m["index"]))
    return Fault(kind, at, switch=m["switch"] or "")
