"""What the controller decides for the simulated switch, shared by both models.

* Priorities: ``sim.priority`` (the controller's rules) for the ESA schemes
  that use them, one level for every job under ``Scheme.ESA_EQUAL``.
* Memory under the STATIC schemes.  ``STATIC_BDP`` is SwitchML's rule: the
  pool is cut into partitions of one bandwidth-delay product; an admitted
  job holds one until it finishes and a job that finds none waits, first
  come first served.  ``STATIC_FB`` runs a job that finds none at once with
  no partition (the switch sends all its contributions to its PS) and gives
  it the first partition that frees.  ``STATIC_EQUAL`` is
  ``controller.partition``: every job is admitted at once and the pool is
  recut equally among the running jobs at every admission and removal.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.partition import partition
from sim.params import EQUAL_PRIORITY, Net, Scheme
from sim.priority import Running, job_priorities


def priorities(scheme: Scheme, net: Net, running: Iterable[Running]) -> dict[int, int]:
    """Priority of every running job, by job id."""
    if scheme is Scheme.ESA_EQUAL:
        return {spec.job_id: EQUAL_PRIORITY for spec, _, _ in running}
    return job_priorities(scheme, net, running)


class Partitions:
    """Which job may stream and through which slots (``part_base, part_size``)."""

    def __init__(self, scheme: Scheme, pool_size: int, net: Net) -> None:
        self.scheme = scheme
        self.pool_size = pool_size
        self.size = net.bdp_partition(pool_size)
        self.free = list(range(pool_size // self.size))
        self.held: dict[int, int] = {}
        """STATIC_BDP: job -> its partition's index."""
        self.running: list[int] = []
        self.waiting: list[int] = []

    def request(self, job: int) -> bool:
        """Admit ``job`` now (True) or queue it until a partition frees (False)."""
        if self.scheme in (Scheme.STATIC_BDP, Scheme.STATIC_FB):
            if not self.free or self.waiting:
                self.waiting.append(job)
                if self.scheme is Scheme.STATIC_BDP:
                    return False
            else:
                self.held[job] = self.free.pop(0)
        self.running.append(job)
        return True

    def release(self, job: int) -> list[int]:
        """``job`` finished; the jobs admitted from the queue in its place."""
        self.running.remove(job)
        if job not in self.held:
            return []
        self.free.append(self.held.pop(job))
        admitted = []
        while self.free and self.waiting:
            nxt = self.waiting.pop(0)
            self.held[nxt] = self.free.pop(0)
            if self.scheme is Scheme.STATIC_BDP:
                self.running.append(nxt)
                admitted.append(nxt)
        return admitted

    def layout(self) -> dict[int, tuple[int, int]]:
        """``job -> (part_base, part_size)`` of every running job; (0, 0)
        under the shared-pool schemes and for a STATIC_FB job without one."""
        if self.scheme in (Scheme.STATIC_BDP, Scheme.STATIC_FB):
            return {
                j: (self.held[j] * self.size, self.size) if j in self.held else (0, 0)
                for j in self.running
            }
        if self.scheme is Scheme.STATIC_EQUAL:
            return partition(self.pool_size, self.running)
        return {j: (0, 0) for j in self.running}
