"""``make run --fault``: the syntax of the faults a run can inject."""

from __future__ import annotations

import pytest

from runner.faults import Fault, FaultKind, parse_fault


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("bmv2-restart@5", Fault(FaultKind.BMV2_RESTART, 5.0)),
        ("controller-restart@2.5", Fault(FaultKind.CONTROLLER_RESTART, 2.5)),
        ("kill-worker=3:1@0", Fault(FaultKind.KILL_WORKER, 0.0, job=3, index=1)),
        (" bmv2-restart@10 ", Fault(FaultKind.BMV2_RESTART, 10.0)),
        ("bmv2-restart=t2@3", Fault(FaultKind.BMV2_RESTART, 3.0, switch="t2")),
    ],
)
def test_faults_parse_and_print_back(text: str, fault: Fault) -> None:
    assert parse_fault(text) == fault
    assert parse_fault(str(fault)) == fault


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bmv2-restart", r"expected bmv2-restart\[=SWITCH\]@T"),
        ("bmv2-restart@", r"expected bmv2-restart\[=SWITCH\]@T"),
        ("bmv2-restart@-1", r"expected bmv2-restart\[=SWITCH\]@T"),
        ("reboot@3", "unknown kind 'reboot'"),
        ("kill-worker@3", "only kill-worker names a worker"),
        ("bmv2-restart=1:0@3", "only kill-worker names a worker"),
        ("controller-restart=s1@3", "only bmv2-restart names a switch"),
        ("kill-worker=s1@3", "only kill-worker names a worker"),
        ("bmv2-restart=S1@3", r"expected bmv2-restart\[=SWITCH\]@T"),
        ("kill-worker=1@3", r"expected bmv2-restart\[=SWITCH\]@T"),
        ("controller-restart@1.2.3", "'1.2.3' is not a number of seconds"),
    ],
)
def test_bad_faults_are_refused_naming_the_forms(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(text)
