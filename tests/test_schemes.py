"""The registry of named schemes (esa.schemes) and what is derived from it."""

from __future__ import annotations

import pytest

from controller.api.cli import build_parser
from esa.schemes import POLICY_NAMES, RULES, RUN_SCHEMES, SIM_SCHEMES, Memory, Ranking, Scheme
from esa.spec import Policy
from runner.scenario import DEFAULT_SCHEMES, SCHEMES, controller_policy
from sim.entry import run_scenario
from sim.params import BASELINES, BOUNDS, ESA_SCHEMES
from sim.replay import SIMULATED_AS


def test_every_scheme_has_its_rules() -> None:
    assert set(RULES) == set(Scheme)


def test_the_run_takes_its_schemes_from_the_registry() -> None:
    assert SCHEMES == ("esa", "esa-equal", "atp", "static", "static-equal")
    assert DEFAULT_SCHEMES == ("esa", "atp", "static", "static-equal")
    assert set(SCHEMES) == {s.value for s in RUN_SCHEMES}


def test_the_controller_is_told_the_switch_policy_partition_and_layout() -> None:
    told = {p: controller_policy(p, 8, "hashed") for p in SCHEMES}
    assert {p: (r.policy, r.part_size, r.layout) for p, r in told.items()} == {
        "esa": ("esa", 0, "hashed"),
        "esa-equal": ("esa", 0, "hashed"),
        "atp": ("atp", 0, None),
        "static": ("static", 8, None),
        "static-equal": ("static", 0, None),
    }
    assert all(r.stale_us is None and r.squat_us is None for r in told.values())


def test_esa_ctl_offers_the_switch_policies() -> None:
    args = build_parser().parse_args(["policy", "atp"])
    assert args.policy == "atp"
    assert tuple(p.name.lower() for p in Policy) == POLICY_NAMES
    with pytest.raises(SystemExit):
        build_parser().parse_args(["policy", "esa-equal"])


def test_the_simulator_groups_its_schemes_by_rule() -> None:
    assert [s.value for s in BASELINES] == ["atp", "static-bdp", "static-fb", "static-equal"]
    assert [s.value for s in ESA_SCHEMES] == ["esa-equal", "esa", "esa-srpt", "esa-aging"]
    assert BOUNDS == (Scheme.PS_ONLY, Scheme.IDEAL)
    assert set(BASELINES + ESA_SCHEMES + BOUNDS) == set(SIM_SCHEMES)
    assert [s for s in Scheme if s.ranked] == [Scheme.ESA, Scheme.ESA_SRPT, Scheme.ESA_AGING]
    assert Scheme.IDEAL.ranking is Ranking.ONE and Scheme.IDEAL.memory is Memory.UNLIMITED


def test_a_run_is_replayed_under_the_scheme_of_its_name() -> None:
    assert SIMULATED_AS == {
        "esa": Scheme.ESA,
        "esa-equal": Scheme.ESA_EQUAL,
        "atp": Scheme.ATP,
        "static": Scheme.STATIC_EQUAL,
        "static-equal": Scheme.STATIC_EQUAL,
    }


def test_the_simulator_refuses_a_scheme_it_does_not_model() -> None:
    with pytest.raises(ValueError, match="the simulator has no scheme 'static'"):
        run_scenario([], 8, "static")
