"""The controller's persistent state: jobs, hosts and the policy, in sqlite3.

The switch holds nothing the controller cannot rebuild from this file: after
a restart of either, the controller plans the entries from it and
reconciles.  Each change is one transaction, written only after the switch
accepted it, so the file never holds a job the switch refused.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from controller.entries import PolicyEntry
from controller.priority import Mode, PrioritySpec
from controller.topology import Host
from esa.spec import Policy

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job INTEGER PRIMARY KEY,
    workers TEXT NOT NULL,
    ps TEXT NOT NULL,
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


@dataclass(frozen=True)
class JobRecord:
    job: int
    workers: tuple[str, ...]
    """host names; worker ``i`` owns bit ``i`` of the job's worker bitmap."""
    ps: str
    spec: PrioritySpec
    admitted_at: float
    """wall-clock seconds (``time.time()``), the origin of aging."""


class Store:
    """One sqlite3 file; callers serialise access (the controller's lock)."""

    def __init__(self, path: Path | str) -> None:
        self.db = sqlite3.connect(str(path), check_same_thread=False)
        self.db.executescript(SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # -- jobs --

    def jobs(self) -> dict[int, JobRecord]:
        rows = self.db.execute(
            "SELECT job, workers, ps, mode, priority, remaining, admitted_at FROM jobs ORDER BY job"
        )
        out = {}
        for job, workers, ps, mode, priority, remaining, admitted_at in rows:
            spec = PrioritySpec(Mode(mode), priority=priority, remaining=remaining)
            out[job] = JobRecord(job, tuple(json.loads(workers)), ps, spec, admitted_at)
        return out

    def put_job(self, rec: JobRecord) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.job,
                    json.dumps(list(rec.workers)),
                    rec.ps,
                    rec.spec.mode.value,
                    rec.spec.priority,
                    rec.spec.remaining,
                    rec.admitted_at,
                ),
            )

    def delete_job(self, job: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM jobs WHERE job = ?", (job,))

    # -- hosts --

    def hosts(self) -> dict[str, Host]:
        rows = self.db.execute("SELECT name, port, mac, ip, udp_port FROM hosts ORDER BY name")
        return {r[0]: Host(*r) for r in rows}

    def set_hosts(self, hosts: dict[str, Host]) -> None:
        with self.db:
            self.db.execute("DELETE FROM hosts")
            self.db.executemany(
                "INSERT INTO hosts VALUES (?, ?, ?, ?, ?)",
                [(h.name, h.port, h.mac, h.ip, h.udp_port) for h in hosts.values()],
            )

    # -- settings --

    def _get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set(self, key: str, value: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def policy(self) -> PolicyEntry:
        raw = self._get("policy")
        if raw is None:
            return PolicyEntry()
        data = json.loads(raw)
        return PolicyEntry(Policy(data["policy"]), int(data["stale_us"]))

    def set_policy(self, entry: PolicyEntry) -> None:
        self._set("policy", json.dumps({"policy": int(entry.policy), "stale_us": entry.stale_us}))

    def pool_size(self) -> int | None:
        raw = self._get("pool_size")
        return None if raw is None else int(raw)

    def set_pool_size(self, size: int) -> None:
        self._set("pool_size", str(size))
