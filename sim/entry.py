"""Both simulators behind one call, ``run_scenario``: a job list under a
scheme, in the packet or the fluid model (the tests' way in, and a user's);
and ``mean_jct``, the average JCT of such a result.

It is not the programs' one way in: they call a model themselves, with its
options (``python -m sim``'s sweep and ``sim.regime`` build
``sim.fluid.FluidSim``, the sweep for its solve counts, ``sim.ranks`` for
its observer; ``sim.calibrate``, ``sim.replay``, ``sim.homes`` and
``sim.tier_report`` call ``sim.packet.simulate`` or ``sim.tiers``)."""

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
    scheme: Scheme | str,
    net: Net | None = None,
    model: Model = "packet",
    seed: int = 0,
) -> dict[int, float]:
    """JCT in seconds per job id.

    ``scheme`` is one of ``esa.schemes.SIM_SCHEMES`` or its name ("atp",
    "static-bdp", "esa-srpt", ...); ``net`` holds the links, the windows, the PS and the hosts'
    options (see ``sim.params.Net``).  ``model="packet"`` runs every packet through
    ``esa.model.SwitchModel`` (small scenarios); ``"fluid"`` is the fast
    rate model calibrated against it.
    """
    known = scheme if isinstance(scheme, Scheme) else Scheme(scheme)
    if known not in SIM_SCHEMES:
        names = ", ".join(s.value for s in SIM_SCHEMES)
        raise ValueError(f"the simulator has no scheme {known.value!r} (one of {names})")
    sim = packet.simulate if model == "packet" else fluid.simulate
    return sim(jobs, pool_size, known, net or Net(), seed)


def mean_jct(jcts: dict[int, float]) -> float:
    return sum(jcts.values()) / len(jcts)
