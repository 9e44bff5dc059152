"""Gone is gone (docs/dataplane.md, rule S13 and its invariant G, and rule
L, lending), checked on ``esa.model`` by hypothesis.

One or two jobs of two or three workers stream chunks through a pool of one
to three slots, so that several chunks of a job, and under sharing the
chunks of both jobs, map to one slot; their seqs start at 0 or just below
2^32 (they wrap).  Under ESA jobs in homes whose windows exceed them borrow
(rule L) in each other's homes or in slots of no home, and owners evict
their guests (``Lending`` weighs those layouts).  The network loses,
duplicates and reorders any packet, workers retransmit any chunk they sent
(RETX) and the clock moves on, so that partials are preempted, reclaimed
as idle or stale, flushed and released.  A PS, modelled as the hosts'
(``hosts.ps.aggregate``: it merges pieces of disjoint bitmaps, drops one that
overlaps what it holds, answers a complete chunk with a PS_RESULT back
through the switch), sums what reaches it.  The test checks

- **G**: no contribution of a chunk any piece of which went from a slot to
  the PS (a fallback or a partial) starts a partial again in a slot whose
  markers it reads (its slots, ``SwitchModel.choices``: h; under ESA its
  second h'; under rule L its borrowed slot g), unless a chunk of another
  job went from that slot to the PS since in the same way: by its own
  packet (the slot's marker), or, for a partial that a chunk of another
  job took the slot from, as such a partial (the victims' marker): the
  residual case of a slot shared by jobs, each marker keeping one.  Which
  slot a piece left is the one its chunk held (``SwitchModel.holding``)
  or, for an evicted partial, the one the evicting contribution took;
- every sum, in the switch or at the PS, is exact;
- once every packet has arrived: a chunk all of whose workers sent it, none
  of its packets lost, has completed without a timer, in the switch or
  whole at its PS, never split between them, unless G's residual case
  made a marker forget it; after rounds of retransmissions by every worker
  of every chunk still open (as the PS's pulls ask for), every chunk has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from esa import wire
from esa.model import JobConfig, Out, Packet, Result, SwitchModel
from esa.spec import Event, Policy, Verdict
from esa.wire import Flag, PacketType

PS_PORT = 30
SEQ_MOD = 1 << 32
STARTS = (Verdict.CLAIM, Verdict.PREEMPT, Verdict.RECLAIM)
"""Verdicts of a contribution that starts a partial in its slot."""
LAYOUTS = {
    Policy.ESA: ("hashed", "homes", "spare-homes", "shared-hashed", "shared-homes"),
    Policy.ATP: ("hashed", "shared-hashed"),
    Policy.STATIC: ("homes", "shared-homes"),
}
"""One job hashed over the pool, or each in a home of its own (under ESA
a busy home borrows, rule L: in the other job's home, or, ``spare-homes``,
in slots of no home), or two jobs sharing every slot."""
RETX_ROUNDS = 3


def value(job: int, seq: int, worker: int) -> tuple[int, ...]:
    """What ``worker`` contributes to chunk (job, seq): the same in every
    copy and retransmission."""
    x = (seq * 7919 + worker * 104729 + job * 31) % 201 - 100
    return tuple(x + lane for lane in range(wire.K))


@dataclass
class JobRun:
    cfg: JobConfig
    offset: int
    window: int
    sent: dict[int, int] = field(default_factory=dict)
    """chunk index -> the bits of the workers that sent it."""

    def seq(self, i: int) -> int:
        return (self.offset + i) % SEQ_MOD

    def next_i(self, worker: int) -> int:
        return sum(1 for bits in self.sent.values() if bits >> worker & 1)


@dataclass
class PsSum:
    bitmap: int = 0
    values: tuple[int, ...] = (0,) * wire.K


class FaultyNetwork(RuleBasedStateMachine):
    """The switch, its PS and the network; the layouts below choose the jobs."""

    def configure(
        self,
        policy: Policy,
        layout: str,
        njobs: int,
        tie: bool,
        fan_in: int,
        part: int,
        window: int,
        offset: int,
        squat: int,
    ) -> None:
        """``njobs`` jobs of ``fan_in`` workers, laid out in a pool as
        ``layout`` (``LAYOUTS``) says; job j of priority j, or all of one
        (``tie``)."""
        self.layout = layout
        self.shared = layout.startswith("shared")
        homes = layout.endswith("homes")
        spare = part if layout == "spare-homes" else 0
        pool = part if self.shared or not homes else part * njobs + spare
        self.sw = SwitchModel(pool_size=pool, policy=policy, stale_us=60, squat_us=squat)
        self.jobs: dict[int, JobRun] = {}
        for job in range(1, njobs + 1):
            base = 0 if self.shared else (job - 1) * part
            cfg = JobConfig(
                fan_in=fan_in,
                worker_mask=(1 << fan_in) - 1,
                priority=1 if tie else job,
                ps_ports=(PS_PORT,),
                part_base=base if homes else 0,
                part_size=part if homes else 0,
            )
            self.sw.add_job(job, cfg)
            self.jobs[job] = JobRun(cfg, (offset + 1000 * (job - 1)) % SEQ_MOD, window)
        self.now = 0
        self.net: list[tuple[Packet, int]] = []
        self.ps: dict[tuple[int, int], PsSum] = {}
        self.done: dict[tuple[int, int], tuple[int, ...]] = {}
        """chunk -> its complete sum, wherever it completed."""
        self.lost: set[tuple[int, int]] = set()
        self.gone: dict[tuple[int, bool], tuple[int, set[int]]] = {}
        """(slot, evicted) -> a job and its seqs any piece of which went
        from the slot to the PS since a chunk of another job last did in the
        same way: evicted (``Slot.evicted``: a partial that a chunk of
        another job took the slot from) or not (``Slot.gone``)."""
        self.exposed: set[tuple[int, int]] = set()
        """chunks a piece of which went from a slot to the PS, and then a
        chunk of another job went from that slot in the same way: the
        marker forgot them (the residual case of a slot shared by jobs)."""
        self.retx_sent = False

    # the network ------------------------------------------------------------
    def chunk_key(self, job: int, i: int) -> tuple[int, int]:
        return job, self.jobs[job].seq(i)

    def exact(self, job: int, seq: int) -> tuple[int, ...]:
        lanes = zip(*(value(job, seq, w) for w in range(self.jobs[job].cfg.fan_in)), strict=True)
        return tuple(sum(lane) for lane in lanes)

    def contribution(self, job: int, i: int, worker: int, flags: int = 0) -> Packet:
        seq = self.jobs[job].seq(i)
        vals = value(job, seq, worker)
        return Packet(PacketType.CONTRIB, job, seq, 1 << worker, vals, flags=flags, count=1)

    def open_chunks(self) -> list[tuple[int, int]]:
        """(job, chunk index) of every chunk some worker sent, not complete."""
        return [
            (job, i)
            for job, run in self.jobs.items()
            for i in sorted(run.sent)
            if self.chunk_key(job, i) not in self.done
        ]

    def slot_of(self, job: int, seq: int) -> int:
        """Where the chunk's rules act now: its slot, or (rule L) the one it
        borrowed."""
        idx = self.sw.holding(job, seq, self.jobs[job].cfg)
        assert idx is not None
        return idx

    def markers(self, job: int, seq: int) -> set[int]:
        """The slots whose markers a contribution of the chunk reads: its
        ``choices`` (h; under ESA h'; under rule L g)."""
        return set(self.sw.choices(job, seq, self.jobs[job].cfg))

    def went(self, slot: int, job: int, seq: int, evicted: bool = False) -> None:
        """A piece of chunk (job, seq) went from ``slot`` to the PS, as a
        partial a chunk of another job took the slot from (``evicted``) or
        not."""
        was, seqs = self.gone.get((slot, evicted), (0, set()))
        if was != job:
            self.exposed |= {(was, s) for s in seqs}
            self.gone[slot, evicted] = was, seqs = job, set()
        seqs.add(seq)

    def complete(self, key: tuple[int, int], values: tuple[int, ...]) -> None:
        assert values == self.exact(*key), f"chunk {key}: wrong sum"
        assert self.done.setdefault(key, values) == values

    def to_ps(self, pkt: Packet) -> None:
        """The PS: merges pieces of disjoint bitmaps and answers a complete
        chunk through the switch; a held result (ATP) completes it too."""
        key = (pkt.job, pkt.seq)
        if pkt.ptype is PacketType.RESULT:
            self.complete(key, pkt.values)
        elif key in self.done:
            return  # the PS answers from its cache; the switch's state is untouched
        else:
            assert pkt.ptype in (PacketType.FALLBACK, PacketType.PARTIAL), pkt
            got = self.ps.setdefault(key, PsSum())
            if got.bitmap & pkt.bitmap:
                return  # overlap: dropped, as hosts.ps.aggregate does
            got.bitmap |= pkt.bitmap
            got.values = tuple(a + b for a, b in zip(got.values, pkt.values, strict=True))
            if got.bitmap != self.jobs[pkt.job].cfg.worker_mask:
                return
            self.complete(key, got.values)
        if self.sw.policy is Policy.ATP or pkt.ptype is not PacketType.RESULT:
            answer = Packet(PacketType.PS_RESULT, pkt.job, pkt.seq, 0, self.done[key])
            self.net.append((answer, PS_PORT))

    def handle(self, pkt: Packet, in_port: int) -> None:
        contrib = pkt.ptype is PacketType.CONTRIB
        before = self.slot_of(pkt.job, pkt.seq) if contrib else 0
        followed = self.sw.events(pkt.job)[Event.FOLLOWED]
        res: Result = self.sw.process(pkt, self.now, in_port)
        after = self.slot_of(pkt.job, pkt.seq) if contrib else 0
        if contrib and res.verdict in STARTS:
            for slot, evicted in product(self.markers(pkt.job, pkt.seq), (False, True)):
                job, seqs = self.gone.get((slot, evicted), (0, set()))
                assert not (job == pkt.job and pkt.seq in seqs), (
                    f"G: chunk ({pkt.job}, {pkt.seq}) started a partial in slot {after} "
                    f"({res.verdict.name}) after a piece of it went to the PS from slot {slot}"
                )
        one_marker = len(self.markers(pkt.job, pkt.seq)) == 1
        for out in res.outputs:
            p = out.packet
            if out.to is Out.PS and p.ptype in (PacketType.FALLBACK, PacketType.PARTIAL):
                if (p.job, p.seq) != (pkt.job, pkt.seq):
                    # evicted from the slot C took
                    self.went(after, p.job, p.seq, evicted=p.job != pkt.job)
                elif p.ptype is PacketType.PARTIAL:
                    self.went(before, p.job, p.seq)  # flushed from its slot
                elif one_marker or self.sw.events(p.job)[Event.FOLLOWED] == followed:
                    # it falls back, marked at its slot h (S8, L6), or
                    # covered there already (S13; a chunk of two or three
                    # slots may find the marker covering it at any, L3)
                    home = self.sw.slot_index(p.job, p.seq, self.jobs[p.job].cfg)
                    assert home is not None
                    self.went(home, p.job, p.seq)
            if out.to in (Out.PS, Out.ALL):
                if p.ptype is PacketType.RESULT:
                    assert p.bitmap == self.jobs[p.job].cfg.worker_mask
                self.to_ps(p)

    def deliver_all(self) -> None:
        while self.net:
            self.handle(*self.net.pop(0))

    # rules ------------------------------------------------------------------
    @rule(job=st.integers(1, 2), worker=st.integers(0, 2))
    def send(self, job: int, worker: int) -> None:
        """A worker sends its next chunk, if its window has room: chunks are
        sent in order, at most ``window`` beyond the oldest still open."""
        run = self.jobs.get(job)
        if run is None or worker >= run.cfg.fan_in:
            return
        i = run.next_i(worker)
        oldest = min((c for j, c in self.open_chunks() if j == job), default=i)
        if i - oldest >= run.window:
            return
        run.sent[i] = run.sent.get(i, 0) | 1 << worker
        self.net.append((self.contribution(job, i, worker), worker + 1))

    @rule(pick=st.integers(0, 10**6), lose=st.booleans())
    def deliver(self, pick: int, lose: bool) -> None:
        """Any packet in flight arrives (reordering), or is lost."""
        if not self.net:
            return
        pkt, port = self.net.pop(pick % len(self.net))
        if not lose:
            self.handle(pkt, port)
        elif pkt.ptype is PacketType.CONTRIB:
            self.lost.add((pkt.job, pkt.seq))

    @rule(pick=st.integers(0, 10**6))
    def duplicate(self, pick: int) -> None:
        """Any packet in flight is duplicated: its copy arrives in its own time."""
        if self.net:
            self.net.append(self.net[pick % len(self.net)])

    @rule(pick=st.integers(0, 10**6), worker=st.integers(0, 2))
    def retransmit(self, pick: int, worker: int) -> None:
        """A worker resends a chunk it sent: one still open, or one whose
        result it did not hear."""
        mine = [
            (job, i)
            for job, run in self.jobs.items()
            for i in sorted(run.sent)
            if worker < run.cfg.fan_in and run.sent[i] >> worker & 1
        ]
        if mine:
            job, i = mine[pick % len(mine)]
            self.net.append((self.contribution(job, i, worker, Flag.RETX), worker + 1))
            self.retx_sent = True

    @rule(us=st.sampled_from([1, 5, 25, 70]))
    def tick(self, us: int) -> None:
        self.now += us

    # the end ----------------------------------------------------------------
    def teardown(self) -> None:
        if not hasattr(self, "sw"):
            return
        # every worker sends what it has not of the chunks begun, in order
        for job, run in self.jobs.items():
            for i in sorted(run.sent):
                for w in range(run.cfg.fan_in):
                    if not run.sent[i] >> w & 1:
                        run.sent[i] |= 1 << w
                        self.net.append((self.contribution(job, i, w), w + 1))
        self.deliver_all()
        stranded = [
            self.chunk_key(job, i)
            for job, i in self.open_chunks()
            if self.chunk_key(job, i) not in self.lost | self.exposed
        ]
        assert not stranded, f"chunks stranded without a loss: {stranded}"
        for _ in range(RETX_ROUNDS):
            for job, i in self.open_chunks():
                for w in range(self.jobs[job].cfg.fan_in):
                    self.net.append((self.contribution(job, i, w, Flag.RETX), w + 1))
            self.deliver_all()
        assert not self.open_chunks(), f"chunks never completed: {self.open_chunks()}"


class GoneIsGone(FaultyNetwork):
    @initialize(
        policy=st.sampled_from(list(LAYOUTS)),
        pick=st.integers(0, 4),
        two=st.booleans(),
        tie=st.booleans(),
        fan_in=st.integers(2, 3),
        part=st.integers(1, 3),
        window=st.integers(1, 4),
        offset=st.sampled_from([0, SEQ_MOD - 3, 12345]),
    )
    def setup(
        self,
        policy: Policy,
        pick: int,
        two: bool,
        tie: bool,
        fan_in: int,
        part: int,
        window: int,
        offset: int,
    ) -> None:
        layouts = LAYOUTS[policy]
        layout = layouts[pick % len(layouts)]
        homes = layout.endswith("homes")
        njobs = 2 if layout.startswith("shared") or (two and homes) else 1
        squat = 20 if policy is Policy.ESA else 0
        self.configure(policy, layout, njobs, tie, fan_in, part, window, offset, squat)


class Lending(FaultyNetwork):
    """Rule L in focus: ESA, two jobs in homes of one or two slots whose
    windows exceed them, so that busy homes borrow in the other job's home
    or in slots of no home and owners evict their guests; the squat rule
    on or off (on, idle homes are mostly reclaimed by their owners)."""

    @initialize(
        layout=st.sampled_from(["homes", "spare-homes"]),
        tie=st.booleans(),
        fan_in=st.integers(2, 3),
        part=st.integers(1, 2),
        window=st.integers(2, 4),
        offset=st.sampled_from([0, SEQ_MOD - 3]),
        squat=st.sampled_from([0, 20]),
    )
    def setup_lending(
        self,
        layout: str,
        tie: bool,
        fan_in: int,
        part: int,
        window: int,
        offset: int,
        squat: int,
    ) -> None:
        self.configure(Policy.ESA, layout, 2, tie, fan_in, part, window, offset, squat)


GoneIsGone.TestCase.settings = settings(max_examples=400, stateful_step_count=100, deadline=None)
TestGoneIsGone = GoneIsGone.TestCase
Lending.TestCase.settings = settings(max_examples=300, stateful_step_count=100, deadline=None)
TestLending = Lending.TestCase
