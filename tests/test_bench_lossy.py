"""bench.lossy's table: per scheme, the JCT, the PS's pulls per job and the
frames each link dropped, read from the runner's files of each round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import lossy
from runner.jobs import LINKS_FILE


def write_round(
    out: Path, jct: float, pulls: int, drops: dict[str, tuple[list[str], int, int]]
) -> None:
    """One round of one scheme (esa), one job of two workers."""
    logs = out / "logs" / "esa"
    logs.mkdir(parents=True)
    row = {"scheme": "esa", "job": 1, "status": "done", "jct_s": jct, "exact": True,
           "retx": 3, "early": 1}  # fmt: skip
    (out / "rounds.json").write_text(json.dumps([row]))
    (logs / "j1ps0.json").write_text(json.dumps({"ps": {"pulls_sent": pulls}}))
    links = {h: {"roles": r, "up": up, "down": down} for h, (r, up, down) in drops.items()}
    (logs / LINKS_FILE).write_text(json.dumps(links))


def test_a_row_shows_pulls_and_each_links_drops_as_means_over_rounds(tmp_path: Path) -> None:
    cells: dict[str, lossy.Cell] = {}
    write_round(tmp_path / "r1", 1.0, 10, {"h3": (["j1ps0"], 4, 6), "h1": (["j1w0"], 1, 2),
                                            "h2": (["j1w1", "j2ps0"], 0, 3)})  # fmt: skip
    write_round(tmp_path / "r2", 2.0, 20, {"h3": (["j1ps0"], 6, 8), "h1": (["j1w0"], 3, 2),
                                            "h2": (["j1w1", "j2ps0"], 2, 5)})  # fmt: skip
    for r in ("r1", "r2"):
        lossy.collect(cells, tmp_path / r)
    assert lossy.row("lossy", 5.0, "esa", cells["esa"]) == (
        "| lossy | 5 | esa | 1.50 | 1.00 | 1.50 | yes | 15 | 6 / 2 "
        "| j1w0 2/2, j1w1+j2ps0 1/4, j1ps0 5/7 |"
    )


@pytest.mark.parametrize(
    ("roles", "key"),
    [("j1w0", (1, False, 0)), ("j12ps3", (12, True, 3)), ("j2w1+j3ps0", (2, False, 1))],
)
def test_role_order(roles: str, key: tuple[int, bool, int]) -> None:
    assert lossy.role_order(roles) == key


def test_role_order_refuses_what_is_no_role() -> None:
    with pytest.raises(ValueError, match="not a role: h1"):
        lossy.role_order("h1")


@pytest.mark.parametrize(
    ("r", "order"),
    [(0, ["esa", "atp", "static"]), (1, ["atp", "static", "esa"]), (2, ["static", "esa", "atp"]),
     (3, ["esa", "atp", "static"])],
)  # fmt: skip
def test_each_round_starts_with_the_next_scheme(r: int, order: list[str]) -> None:
    assert lossy.rotated(["esa", "atp", "static"], r) == order
