"""What the controller decides for the simulated switch, shared by both models.

* Priorities: ``sim.priority`` (the controller's rules), one level for
  every job under a scheme of ``Ranking.ONE`` (``esa.schemes``).
* Memory under the STATIC schemes.  ``STATIC_BDP`` is SwitchML's rule: the
  pool is cut into partitions of one bandwidth-delay product; an admitted
  job holds one until it finishes and a job that finds none waits, first
  come first served.  ``STATIC_FB`` runs a job that finds none at once with
  no partition (the switch sends all its contributions to its PS) and gives
  it the first partition that frees.  ``STATIC_EQUAL`` is
  ``controller.world.partition``: every job is admitted at once and the pool is
  recut equally among the running jobs at every admission and removal.
* Wire ids (``sim.leases``): a job holds one from its admission by the
  controller, waiting for a partition included, to its end; a job that
  finds none free waits for one before anything else.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from controller.world.partition import Parts, by_priority, partition
from esa import wire
from esa.job import EQUAL_PRIORITY
from esa.schemes import Memory, Ranking, Scheme
from sim.leases import Leases
from sim.params import Net
from sim.priority import Running, job_priorities

BDP = (Memory.BDP_WAIT, Memory.BDP_FALLBACK)
"""SwitchML's partitions of one bandwidth-delay product."""


def priorities(
    scheme: Scheme, net: Net, running: Iterable[Running], held: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Priority of every running job, by job id; ``held``: those the running
    jobs hold now."""
    if scheme.ranking is Ranking.ONE:
        return {spec.job: EQUAL_PRIORITY for spec, _, _ in running}
    return job_priorities(scheme, net, running, held)


class Leased:
    """Admission with a wire id (``sim.leases``): a job is placed once it
    holds one and, while all are held, waits for one before anything else;
    on its end its id goes to the first job waiting, which is placed then.
    What placing means (a partition, or one at each switch of a fabric) is
    the subclass's ``place`` and ``unplace``."""

    def __init__(self) -> None:
        self.leases = Leases(wire.MAX_JOB_ID)

    def place(self, job: int) -> bool:
        """Run ``job`` (True) or queue it for memory (False)."""
        raise NotImplementedError

    def unplace(self, job: int) -> list[int]:
        """``job`` finished; the jobs its memory admitted in its place."""
        raise NotImplementedError

    def request(self, job: int) -> bool:
        """Admit ``job`` now (True) or queue it until a wire id or its
        memory frees (False)."""
        return self.leases.lease(job) is not None and self.place(job)

    def release(self, job: int) -> list[int]:
        """``job`` finished; the jobs admitted in its place."""
        admitted = self.unplace(job)
        waited = self.leases.release(job)
        if waited is not None and self.place(waited):
            admitted.append(waited)
        return admitted

    def wire(self, job: int) -> int:
        """The wire id ``job`` holds: its key in every job table it is in."""
        return self.leases.held[job]


class Partitions(Leased):
    """Which job may stream and through which slots (``part_base, part_size``)."""

    def __init__(
        self, scheme: Scheme, pool_size: int, size: int, homes: bool = False, home_size: int = 0
    ) -> None:
        """``size``: slots of a STATIC_BDP or STATIC_FB partition (one
        bandwidth-delay product of the switch's path, ``Net.bdp_partition``);
        ``homes``, ``home_size``: ``Net.esa_homes``, ``Net.esa_home_size``."""
        super().__init__()
        self.scheme = scheme
        self.homes = homes and scheme.memory is Memory.HOMES
        self.home_size = home_size
        self.pool_size = pool_size
        self.size = size
        self.free = list(range(pool_size // self.size))
        self.held: dict[int, int] = {}
        """STATIC_BDP: job -> its partition's index."""
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.homes_held: Parts = {}
        """ESA's homes as last handed out: each stays while its job runs
        (``controller.world.partition.esa_homes``)."""

    def place(self, job: int) -> bool:
        """Run ``job``, or queue it for a partition."""
        if self.scheme.memory in BDP:
            if not self.free or self.waiting:
                self.waiting.append(job)
                if self.scheme.memory is Memory.BDP_WAIT:
                    return False
            else:
                self.held[job] = self.free.pop(0)
        self.running.append(job)
        return True

    def unplace(self, job: int) -> list[int]:
        self.running.remove(job)
        admitted = []
        if job in self.waiting:  # STATIC_FB: it ran without a partition
            self.waiting.remove(job)
        if job in self.held:
            self.free.append(self.held.pop(job))
            while self.free and self.waiting:
                nxt = self.waiting.popleft()
                self.held[nxt] = self.free.pop(0)
                if self.scheme.memory is Memory.BDP_WAIT:
                    self.running.append(nxt)
                    admitted.append(nxt)
        return admitted

    def layout(self, prios: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
        """``job -> (part_base, part_size)`` of every running job; (0, 0)
        under the shared-pool schemes and for a STATIC_FB job without one;
        ESA's homes go by ``prios`` (job -> priority), highest first, and
        by the homes held, as the controller hands them out
        (``controller.world.partition.esa_homes``, ``home_size`` the least
        home)."""
        if self.homes:
            if prios is None:
                raise ValueError("ESA's homes are handed out by priority: give prios")
            order = by_priority(self.running, prios)
            held = self.homes_held
            self.homes_held = partition(self.pool_size, order, self.home_size, held, ranked=True)
            return self.homes_held
        if self.scheme.memory in BDP:
            return {
                j: (self.held[j] * self.size, self.size) if j in self.held else (0, 0)
                for j in self.running
            }
        if self.scheme.memory is Memory.EQUAL_SPLIT:
            return partition(self.pool_size, self.running)
        return {j: (0, 0) for j in self.running}


class FabricPartitions(Leased):
    """Partitions at every switch a job uses (``sim.tiers``), each switch
    handing out its own pool as ``Partitions`` does.  STATIC_BDP admits a
    job only when each of its switches has a partition free, first come
    first served across the fabric; the other schemes admit it at once.

    A job leases one wire id for the whole fabric (``sim.leases``), from its
    admission, waiting for partitions included, to its end: every switch's
    job table and every packet carry it.  While all are held an arriving job
    waits for one before anything else.  The switches' ``Partitions`` only
    place it (``place``, ``unplace``): they lease no id of their own."""

    def __init__(
        self, scheme: Scheme, switches: dict[str, Partitions], uses: dict[int, tuple[str, ...]]
    ) -> None:
        super().__init__()
        self.scheme = scheme
        self.switches = switches
        self.uses = uses
        """job -> the switches that aggregate it."""
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        """STATIC_BDP: jobs waiting for a partition at every switch they use."""

    def _fits(self, job: int) -> bool:
        return all(self.switches[s].free for s in self.uses[job])

    def _start(self, job: int) -> None:
        for s in self.uses[job]:
            self.switches[s].place(job)
        self.running.append(job)

    def place(self, job: int) -> bool:
        """Run ``job``, or queue it for partitions."""
        if self.scheme.memory is Memory.BDP_WAIT and (self.waiting or not self._fits(job)):
            self.waiting.append(job)
            return False
        self._start(job)
        return True

    def unplace(self, job: int) -> list[int]:
        self.running.remove(job)
        for s in self.uses[job]:
            self.switches[s].unplace(job)
        admitted = []
        while self.waiting and self._fits(self.waiting[0]):
            nxt = self.waiting.popleft()
            self._start(nxt)
            admitted.append(nxt)
        return admitted

    def layout(self, switch: str) -> dict[int, tuple[int, int]]:
        return self.switches[switch].layout()
