"""The docs date what they measured, in terms a reader outside the project
can resolve.

- "session" in README.md and docs/**/*.md means only the protocol's
  sessions: the PS's session of the call agreement (docs/agreement.md) and
  the controller's P4Runtime session with a switch.  A development session
  ("this session", "the previous session") is no date a reader can look
  up; write the date, the commit and the machine instead.
- Every row of docs/results.md's tables carries, in its ``measured``
  column, a date (YYYY-MM-DD) and a commit ("at C", "at or before C" or
  "before C"), and in its ``machine`` column one of the machines its
  machines table describes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RESULTS = ROOT / "docs" / "results.md"

SESSION = re.compile(r"session", re.I)
"""Any occurrence, inside a word too: "sessions", "SwitchSession"."""

ALLOWED = [
    # The PS's session: a field of the control messages (esa/wire.py,
    # docs/protocol.md) that the call agreement checks (docs/agreement.md).
    r"`session`",
    r"PS process's random session",
    r"made for another session \(the PS restarted",
    r"within a session each worker process",
    r"a PS it has no session",
    # The controller's P4Runtime session with a switch (controller/device/session.py,
    # controller/device/p4rt.py).
    r"P4Runtime session",
    r"SwitchSession",
    r"p4rt\.Session",
    r"`session\.py`",
    r"\b(?:one|a) session per\b",
    r"\bswitch(?:'s)? session\b",
]
"""The protocol's meanings, phrase by phrase; a line may use "session" only
inside one of them."""


@dataclass(frozen=True)
class Hit:
    where: str
    line: str


def stray_sessions(name: str, text: str, allowed: list[str]) -> tuple[list[Hit], set[str]]:
    """The lines of ``text`` that use "session" outside the ``allowed``
    phrases, and the phrases that matched somewhere."""
    stray: list[Hit] = []
    used: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        rest = line
        for phrase in allowed:
            rest, n = re.subn(phrase, "", rest, flags=re.I)
            if n:
                used.add(phrase)
        if SESSION.search(rest):
            stray.append(Hit(f"{name}:{number}", line.strip()))
    return stray, used


def test_session_means_only_the_protocols() -> None:
    assert len(DOCS) >= 10, f"read only {len(DOCS)} docs: {DOCS}"
    stray: list[Hit] = []
    used: set[str] = set()
    for doc in DOCS:
        hits, phrases = stray_sessions(str(doc.relative_to(ROOT)), doc.read_text(), ALLOWED)
        stray += hits
        used |= phrases
    assert not stray, (
        '"session" outside the protocol\'s meanings (date, commit and machine '
        "instead of a working session; or a protocol phrase to ALLOWED):\n"
        + "\n".join(f"  {h.where}: {h.line}" for h in stray)
    )
    unused = [p for p in ALLOWED if p not in used]
    assert not unused, f"allowed phrases no doc uses any more, to drop: {unused}"


def test_the_session_rule() -> None:
    text = "\n".join(
        [
            "Measured in this session, 2026-12-03.",
            "The previous sessions' numbers.",
            "A PS process has a random `session`.",
            "`SwitchSession.commit` writes over `p4rt.Session.write`.",
            "The P4Runtime session closes; and so does this session.",
            "Nothing here.",
        ]
    )
    stray, used = stray_sessions("x.md", text, ALLOWED)
    assert [h.where for h in stray] == ["x.md:1", "x.md:2", "x.md:5"]
    assert {r"`session`", "SwitchSession", r"p4rt\.Session", "P4Runtime session"} <= used


# --- docs/results.md: every row dated -----------------------------------------

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"\b(?:at|at or before|before) ([0-9a-f]{7,40})\b")


Table = tuple[int, list[str], list[tuple[int, list[str]]]]
"""A table's header line number and cells, then each row's line number and
cells."""


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Each table of ``text``, the separator row left out."""
    found: list[Table] = []
    block: list[tuple[int, str]] = []
    for number, line in [*enumerate(text.splitlines(), 1), (0, "")]:
        if line.startswith("|"):
            block.append((number, line))
            continue
        if block:
            (head_at, head), _, *rows = block
            found.append((head_at, cells(head), [(n, cells(r)) for n, r in rows]))
            block = []
    return found


@pytest.fixture(scope="module")
def results() -> list[Table]:
    return tables(RESULTS.read_text())


def machines(found: list[Table]) -> set[str]:
    keys = [rows for _, head, rows in found if head[0] == "machine"]
    assert len(keys) == 1, "docs/results.md has one machines table (first column `machine`)"
    return {row[0] for _, row in keys[0]}


def test_every_results_row_is_dated(results: list[Table]) -> None:
    known = machines(results)
    assert {"A", "B", "C", "D"} <= known
    letters = "|".join(sorted(known))
    machine_cell = re.compile(rf"^(?:{letters})(?: or (?:{letters}))?\b")
    wrong: list[str] = []
    checked = 0
    for head_at, head, rows in results:
        if head[0] == "machine":
            continue
        if "measured" not in head or "machine" not in head:
            wrong.append(f"docs/results.md:{head_at}: a table without `measured` and `machine`")
            continue
        when, on = head.index("measured"), head.index("machine")
        for number, row in rows:
            checked += 1
            if len(row) != len(head):
                wrong.append(f"docs/results.md:{number}: {len(row)} cells, header {len(head)}")
                continue
            if not DATE.search(row[when]) or not COMMIT.search(row[when]):
                wrong.append(f"docs/results.md:{number}: measured {row[when]!r}: no date or commit")
            if not machine_cell.match(row[on]):
                wrong.append(f"docs/results.md:{number}: machine {row[on]!r} not in {known}")
    assert checked >= 30, f"only {checked} rows checked: did the tables' layout change?"
    assert not wrong, "\n".join(wrong)


def git(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("git")
    assert exe is not None
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_results_commits_exist(results: list[Table]) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here to look the commits up in")
    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("a shallow clone holds too little history to look the commits up in")
    named = {
        c
        for _, head, rows in results
        if "measured" in head
        for _, row in rows
        for c in COMMIT.findall(row[head.index("measured")])
    }
    assert len(named) >= 20
    missing = [
        c
        for c in sorted(named)
        if git("rev-parse", "--verify", "--quiet", f"{c}^{{commit}}").returncode
    ]
    assert not missing, f"docs/results.md names commits this history does not hold: {missing}"
