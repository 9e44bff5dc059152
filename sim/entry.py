"""One entry point for both simulators, for the sweep, the tests and a
comparison with a packet-level Mininet run of the same jobs."""

from __future__ import annotations

from typing import Literal

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import fluid, packet
from sim.params import Net

Model = Literal["packet", "fluid"]


def run_scenario(
    jobs: list[JobSpec],
    pool_size: int,
    policy: Scheme | str,
    net: Net | None = None,
    model: Model = "packet",
    seed: int = 0,
) -> dict[int, float]:
    """JCT in seconds per job id.

    ``policy`` is one of ``esa.schemes.SIM_SCHEMES`` or its name ("atp",
    "static-bdp", "esa-srpt", ...); ``net`` holds the links, the windows, the PS and the hosts'
    options (see ``sim.params.Net``).  ``model="packet"`` runs every packet through
    ``esa.model.SwitchModel`` (small scenarios); ``"fluid"`` is the fast
    rate model calibrated against it.
    """
    scheme = policy if isinstance(policy, Scheme) else Scheme(policy)
    if scheme not in SIM_SCHEMES:
        names = ", ".join(s.value for s in SIM_SCHEMES)
        raise ValueError(f"the simulator has no scheme {scheme.value!r} (one of {names})")
    sim = packet.simulate if model == "packet" else fluid.simulate
    return sim(jobs, pool_size, scheme, net or Net(), seed)


def mean_jct(jcts: dict[int, float]) -> float:
    return sum(jcts.values()) / len(jcts)
