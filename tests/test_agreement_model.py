"""A model check of call agreement (docs/agreement.md).

Hypothesis drives one job (two workers, one or two PS shards, a three-slot
switch) on a virtual clock (``tests.vworld``) through rounds of calls, in
any order: every worker process starts its next call at a skewed time,
while the round's faults strike: losses up to a blackout, PS restarts (and
downtime), forged, replayed and mutated control datagrams to the PS hosts
and the workers, crashed worker processes and second processes with a
taken index; between rounds the job idles or restarts (its processes say
BYE, or vanish).  After every round it checks that

- no sum is ever wrong: each is the exact sum of the round's tensors;
- every call ends, with its sum or a named error, by its deadline (plus
  the time to ask the PS hosts who is missing);
- a call whose only faults are losses and control datagrams of others
  succeeds, a call interrupted by a PS restart succeeds or times out
  saying so, a worker that lost its peer is told which, and the first call
  after any fault succeeds (after a crash or a duplicate: once the job has
  restarted; a job restarted within ``LIVE_TTL`` of a process's death
  without BYE may still fail its first call, with a named error, and
  succeeds at the next);
- no forged, replayed or mutated datagram changed anything at its target.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from esa import wire
from esa.wire import LIVE_TTL
from hosts.worker.errors import AllreduceTimeout, CallRejected
from tests.vworld import ASKING, FAN_IN, TIMEOUT, Process, World, exact, tensor

EXAMPLES, STEPS = 60, 8
AT = st.sampled_from([0.0, 0.002, 0.02, 0.2, 0.7, 1.2])
KINDS = ["loss", "ps_restart", "forge_ps", "forge_worker", "replay", "mutate", "crash", "duplicate"]
FAULT = st.tuples(st.sampled_from(KINDS), AT, st.integers(0, 5), st.sampled_from([0.0, 0.3, 1.0]))
MASKED = {"loss", "forge_ps", "forge_worker", "replay", "mutate"}
"""faults every call must survive."""
LOSS = (0.1, 0.3, 1.0)
SKEW = st.sampled_from([0.0, 0.3, 1.5])


class AgreementModel(RuleBasedStateMachine):
    world: World

    @initialize(shards=st.sampled_from([1, 2]), seed=st.integers(0, 2**20))
    def start(self, shards: int, seed: int) -> None:
        self.world = World(shards, seed)
        self.run_id = self.world.new_run()
        for i in range(FAN_IN):
            self.world.spawn(i, self.run_id)
        self.healthy = True
        """every index has one process of the current run, all in step."""
        self.lenient = False
        """the job restarted within ``LIVE_TTL`` of a process's death
        without BYE: its next call may fail (with a named error)."""
        self.died = float("-inf")

    @rule(faults=st.lists(FAULT, max_size=3), skew=st.tuples(SKEW, SKEW))
    def round(self, faults: list[tuple[str, float, int, float]], skew: tuple[float, float]) -> None:
        w = self.world
        t0 = w.now
        procs = list(w.procs)
        for p in procs:
            w.at(t0 + skew[p.worker.index], functools.partial(w.begin, p))
        started = len(procs)
        for kind, at, n, x in faults:
            w.at(t0 + at, functools.partial(self._strike, kind, n, x))
        kinds = {kind for kind, *_ in faults}
        limit = t0 + 1.5 + TIMEOUT + ASKING + 0.01
        w.run(lambda: not w.timers and not any(p.busy for p in w.procs), limit)
        w.loss = 0.0
        for p in [p for p in w.procs if p.calls and p.calls[-1].start >= t0]:
            self._check_call(p, t0)
        assert w.state_changes == 0, f"{w.state_changes} of {w.attacks} attacks changed state"
        outcomes = [p.calls[-1] for p in procs if p in w.procs and p.calls[-1].start >= t0]
        strict, self.lenient = self.healthy and not self.lenient, False
        if kinds & {"crash", "duplicate"}:
            self.healthy = False
        if not strict:
            return
        if kinds <= MASKED:
            assert len(outcomes) == started
            assert all(o.error is None for o in outcomes), [str(o.error) for o in outcomes]
        if kinds <= MASKED | {"ps_restart"}:
            for o in outcomes:
                assert o.error is None or (
                    isinstance(o.error, AllreduceTimeout) and "restarted" in str(o.error)
                ), str(o.error)
        crashed = [n % FAN_IN for kind, _, n, _ in faults if kind == "crash"]
        if kinds <= MASKED | {"crash"} and len(set(crashed)) == 1:
            for o in outcomes:
                assert o.error is None or (
                    isinstance(o.error, AllreduceTimeout) and o.error.missing == crashed[:1]
                ), str(o.error)

    def _strike(self, kind: str, n: int, x: float) -> None:
        w = self.world
        if kind == "loss":
            w.loss = LOSS[n % len(LOSS)]
            w.at(w.now + max(x, 0.1), lambda: setattr(w, "loss", 0.0))
        elif kind == "ps_restart":
            w.restart_ps(n % w.shards, x)
        elif kind in ("forge_ps", "forge_worker"):
            w.attack(*w.forged(kind == "forge_ps"))
        elif kind in ("replay", "mutate"):
            got = w.recorded(kind == "mutate")
            if got is not None:
                w.attack(*got)
        elif kind == "crash":
            w.procs = [p for p in w.procs if p.worker.index != n % FAN_IN or p.run != self.run_id]
            self.died = w.now
        else:
            i = n % FAN_IN
            dup = w.spawn(i, w.new_run(), (f"10.0.2.{i}", wire.UDP_PORT))
            w.begin(dup)

    def _check_call(self, p: Process, t0: float) -> None:
        """The call ``p`` started at ``t0`` or later ended in time, with an
        error or the exact sum of one tensor of each index: of the process
        that ran the same call with that index, or of one of them if two did
        (a second process may win an index its first holder then loses)."""
        o = p.calls[-1]
        assert o.end is not None, f"a call started at {o.start} s never ended"
        assert o.end <= o.start + TIMEOUT + ASKING, f"a call ended {o.end - o.start} s after"
        if o.total is not None:
            options = [
                [tensor(q.run, i, o.number) for q in self.world.ever
                 if q.worker.index == i and any(c.number == o.number and c.start >= t0
                                                for c in q.calls)]
                for i in range(FAN_IN)
            ]  # fmt: skip
            sums = [exact(list(combo)) for combo in itertools.product(*options)]
            assert any(np.array_equal(s, o.total) for s in sums), "a wrong sum"
        else:
            assert isinstance(o.error, (AllreduceTimeout, CallRejected)), o.error

    @rule(bye=st.booleans())
    def restart_job(self, bye: bool) -> None:
        """Every process of the job leaves (BYE) or vanishes; new ones start."""
        w = self.world
        for p in w.procs:
            if bye:
                p.worker.leave()
            else:
                self.died = w.now
        w.procs = []
        self.lenient = w.now - self.died < LIVE_TTL
        self.run_id = w.new_run()
        for i in range(FAN_IN):
            w.spawn(i, self.run_id)
        self.healthy = True

    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0]))
    def idle(self, seconds: float) -> None:
        w = self.world
        w.run(lambda: False, w.now + seconds)


AgreementModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAgreementModel = AgreementModel.TestCase
