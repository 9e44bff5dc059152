"""The controller's persistent state: jobs, hosts and the policy, in sqlite3.

The switch holds nothing the controller cannot rebuild from this file: after
a restart of either, the controller plans the entries from it and
reconciles.  Each change is one transaction, written only after the switch
accepted it, so the file never holds a job the switch refused.

Opening a file checks that it is one: a file that is not sqlite, a database
with tables of another program, or one sqlite finds damaged is refused
without being written to.  A file written when a job had one PS (a ``ps``
column holding one host name) is migrated in one transaction: its jobs keep
running across the upgrade, since a refused file would have to be replaced
by an empty one, and the controller would then remove every job from the
switch.  Every sqlite error and every row that does not decode becomes a
``StateError`` naming the file.

The hosts table holds each host on its own switch's port.  A fabric of
several switches is also kept whole, as its JSON (``controller.world.fabric``), in
the settings; a one-switch file has none, and its switch is the one
``serve`` is told to connect to.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.device.entries import PolicyEntry
from controller.errors import ControllerError, StateError
from controller.world.fabric import Fabric
from controller.world.partition import Layout
from controller.world.topology import Host, parse_host
from esa.job import Mode, Placement, Priority
from esa.spec import Policy, default_squat_us

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job INTEGER PRIMARY KEY,
    workers TEXT NOT NULL,
    ps_hosts TEXT NOT NULL,
    mode TEXT NOT NULL,
    priority INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    admitted_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    port INTEGER NOT NULL,
    mac TEXT NOT NULL,
    ip TEXT NOT NULL,
    udp_port INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


ONE_PS_JOB_COLUMNS = ["job", "workers", "ps", "mode", "priority", "remaining", "admitted_at"]
"""the jobs table of a file written when a job had one PS."""


@dataclass(frozen=True)
class JobRecord:
    job: int
    placement: Placement
    """host names: worker ``i`` owns bit ``i`` of the job's worker bitmap."""
    priority: Priority
    admitted_at: float
    """wall-clock seconds (``time.time()``), the origin of aging."""


@dataclass(frozen=True)
class State:
    """What the switch must reflect: the jobs, the policy and the static
    partition size (``controller.world.partition``; 0: an equal split)."""

    jobs: Mapping[int, JobRecord]
    policy: PolicyEntry
    part_size: int
    layout: Layout = Layout.HOMES
    """ESA's: homes or every job hashed (``controller.world.partition.Layout``)."""


class Store:
    """One sqlite3 file; callers serialise access (the controller's lock)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.db = sqlite3.connect(str(path), check_same_thread=False)
        except sqlite3.Error as e:
            raise StateError(f"cannot open the state file {path}: {e}") from None
        try:
            self._check()
            with self._io():
                self.db.executescript(SCHEMA)
                self.db.commit()
        except StateError:
            self.db.close()
            raise

    def _check(self) -> None:
        """Refuse a file that is not an (empty or) esa-ctl state file; migrate
        a sound one of the one-PS schema."""
        try:
            have = _columns(self.db)
        except sqlite3.OperationalError as e:
            raise StateError(f"state file {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:
            raise StateError(f"state file {self.path} is damaged or not sqlite: {e}") from None
        with closing(sqlite3.connect(":memory:")) as fresh:
            fresh.executescript(SCHEMA)
            want = _columns(fresh)
        foreign = sorted(set(have) - set(want))
        if foreign:
            raise StateError(
                f"{self.path} is not an esa-ctl state file: it has table(s) {', '.join(foreign)}"
            )
        one_ps = have.get("jobs") == ONE_PS_JOB_COLUMNS
        for table, cols in have.items():
            if cols != want[table] and not (table == "jobs" and one_ps):
                raise StateError(
                    f"{self.path} is not an esa-ctl state file: table {table} has columns "
                    + ", ".join(cols)
                )
        with self._io():
            verdict = [row[0] for row in self.db.execute("PRAGMA quick_check")]
        if verdict != ["ok"]:
            raise StateError(f"state file {self.path} is corrupt: {'; '.join(verdict[:3])}")
        if one_ps:
            self._migrate_one_ps()

    def _migrate_one_ps(self) -> None:
        """Each job's one PS host becomes a list of one, in one transaction."""
        with self._io(), self.db:
            self.db.execute("BEGIN")
            rows = self.db.execute("SELECT job, ps FROM jobs").fetchall()
            self.db.execute("ALTER TABLE jobs RENAME COLUMN ps TO ps_hosts")
            self.db.executemany(
                "UPDATE jobs SET ps_hosts = ? WHERE job = ?",
                [(json.dumps([ps]), job) for job, ps in rows],
            )

    @contextmanager
    def _io(self) -> Iterator[None]:
        """sqlite errors, and rows that do not decode, as ``StateError``."""
        try:
            yield
        except sqlite3.Error as e:
            raise StateError(f"state file {self.path}: {e}") from None
        except (ValueError, KeyError, TypeError, AttributeError, ControllerError) as e:
            raise StateError(f"state file {self.path} is corrupt: {e}") from None

    def close(self) -> None:
        self.db.close()

    def load(self) -> State:
        return State(self.jobs(), self.policy(), self.part_size(), self.layout())

    # -- jobs --

    def jobs(self) -> dict[int, JobRecord]:
        out = {}
        with self._io():
            rows = self.db.execute(
                "SELECT job, workers, ps_hosts, mode, priority, remaining, admitted_at "
                "FROM jobs ORDER BY job"
            )
            for job, workers, ps_hosts, mode, priority, remaining, admitted_at in rows:
                spec = Priority(Mode(mode), priority=priority, remaining=remaining)
                placement = Placement(
                    _names(workers, job, "workers"), _names(ps_hosts, job, "PS hosts")
                )
                out[job] = JobRecord(job, placement, spec, admitted_at)
        return out

    def put_job(self, rec: JobRecord) -> None:
        with self._io(), self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.job,
                    json.dumps(list(rec.placement.workers)),
                    json.dumps(list(rec.placement.ps)),
                    rec.priority.mode.value,
                    rec.priority.priority,
                    rec.priority.remaining,
                    rec.admitted_at,
                ),
            )

    def delete_job(self, job: int) -> None:
        with self._io(), self.db:
            self.db.execute("DELETE FROM jobs WHERE job = ?", (job,))

    # -- hosts --

    def hosts(self) -> dict[str, Host]:
        with self._io():
            rows = self.db.execute("SELECT name, port, mac, ip, udp_port FROM hosts ORDER BY name")
            return {
                name: parse_host(name, {"port": port, "mac": mac, "ip": ip, "udp_port": udp})
                for name, port, mac, ip, udp in rows
            }

    def set_hosts(self, hosts: dict[str, Host]) -> None:
        with self._io(), self.db:
            self.db.execute("DELETE FROM hosts")
            self.db.executemany(
                "INSERT INTO hosts VALUES (?, ?, ?, ?, ?)",
                [(h.name, h.port, h.mac, h.ip, h.udp_port) for h in hosts.values()],
            )

    def fabric(self) -> Fabric | None:
        """The saved fabric of several switches, if there is one."""
        raw = self._get("fabric")
        if raw is None:
            return None
        with self._io():
            return Fabric.from_json(json.loads(raw))

    def set_fabric(self, fabric: Fabric) -> None:
        """Save the hosts and, for several switches, the whole fabric."""
        self.set_hosts(fabric.hosts)
        with self._io(), self.db:
            if len(fabric.devices) > 1:
                raw = json.dumps(fabric.to_json())
                self.db.execute("INSERT OR REPLACE INTO settings VALUES ('fabric', ?)", (raw,))
            else:
                self.db.execute("DELETE FROM settings WHERE key = 'fabric'")

    # -- settings --

    def _get(self, key: str) -> str | None:
        with self._io():
            row = self.db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set(self, key: str, value: str) -> None:
        with self._io(), self.db:
            self.db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def policy(self) -> PolicyEntry:
        raw = self._get("policy")
        if raw is None:
            return PolicyEntry()
        with self._io():
            data = json.loads(raw)
            policy = Policy(data["policy"])
            squat = data.get("squat_us", default_squat_us(policy))
            return PolicyEntry(policy, int(data["stale_us"]), int(squat))

    def set_policy(self, entry: PolicyEntry) -> None:
        data = {"policy": int(entry.policy), "stale_us": entry.stale_us, "squat_us": entry.squat_us}
        self._set("policy", json.dumps(data))

    def part_size(self) -> int:
        """Static partition size (``controller.world.partition``); 0: equal split."""
        raw = self._get("part_size")
        if raw is None:
            return 0
        with self._io():
            return int(raw)

    def set_part_size(self, size: int) -> None:
        self._set("part_size", str(size))

    def layout(self) -> Layout:
        """ESA's layout; homes in a state file written before there was a choice."""
        raw = self._get("layout")
        if raw is None:
            return Layout.HOMES
        with self._io():
            return Layout(raw)

    def set_layout(self, layout: Layout) -> None:
        self._set("layout", layout.value)

    def pool_size(self) -> int | None:
        raw = self._get("pool_size")
        if raw is None:
            return None
        with self._io():
            return int(raw)

    def set_pool_size(self, size: int) -> None:
        self._set("pool_size", str(size))


def _columns(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Table name -> its column names."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        t: [c[0] for c in db.execute("SELECT name FROM pragma_table_info(?)", (t,))] for t in tables
    }


def _names(raw: Any, job: int, what: str) -> tuple[str, ...]:
    """A job row's workers or PS hosts: a JSON list of host names."""
    try:
        names = json.loads(raw)
    except (TypeError, ValueError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"job {job}: {what} {raw!r} are not a JSON list of host names")
    return tuple(names)
