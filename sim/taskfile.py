"""A sweep's results file: each finished task's rows, appended as it finishes.

The file is CSV under a first line ``# sweep <fingerprint>``, the hash of
the sweep's task list and of the code that runs it, so that a rerun resumes
only the sweep that wrote it, at the same code.
A task's rows carry a ``task_rows`` column (how many it has) and go in with
one write, flushed and synced: a kill loses at most the tasks in flight, and
what a kill can leave (a task short of rows, a last line with no newline)
is dropped on opening, its task to run again.  Floats are written as
``repr``, so they read back exactly.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib
import io
import os
from collections.abc import Sequence
from pathlib import Path

Row = dict[str, object]
Key = tuple[object, ...]
COUNT = "task_rows"


MODEL_PACKAGES = ("esa", "sim", "controller", "hosts")
"""The packages whose code the numbers of a task depend on: the switch
rules, both simulators, the controller's layout and priorities, the hosts'
timers."""


@functools.cache
def code_fingerprint() -> str:
    """The hash of every Python source file of ``MODEL_PACKAGES`` (path and
    bytes), so that a results file written by other code is not resumed."""
    digest = hashlib.sha256()
    for name in MODEL_PACKAGES:
        root = Path(importlib.import_module(name).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def fingerprint(tasks: Sequence[object], columns: dict[str, type]) -> str:
    """The hash of the tasks (by ``repr``, so of every field of every point),
    of the columns and of the code that computes them (``code_fingerprint``)."""
    text = (
        code_fingerprint()
        + "\n"
        + repr(list(columns.items()))
        + "\n"
        + "\n".join(repr(t) for t in tasks)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StaleFile(RuntimeError):
    """The file holds another sweep's tasks."""


class TaskFile:
    """``columns`` maps each column to its type (``int``, ``float`` or
    ``str``); the first ``keys`` of them name a task."""

    def __init__(
        self, path: Path, columns: dict[str, type], keys: int, fingerprint: str, fresh: bool
    ) -> None:
        self.path, self.columns, self.keys = path, columns, keys
        self.head = f"# sweep {fingerprint}\n{','.join([*columns, COUNT])}\n"
        self.done: dict[Key, list[Row]] = {}
        """each finished task's rows, by its key."""
        if path.exists() and not fresh:
            self._resume(fingerprint)
        else:
            self._rewrite()

    def _resume(self, fingerprint: str) -> None:
        text = self.path.read_text(encoding="utf-8")
        first, _, _ = text.partition("\n")
        if first != f"# sweep {fingerprint}":
            raise StaleFile(
                f"{self.path} holds another sweep, or one run by other code (its first line "
                f"{first!r}, this sweep's "
                f"fingerprint {fingerprint}): --fresh starts it over"
            )
        lines = text.removeprefix(self.head).split("\n")[:-1]
        """the last piece has no newline: empty, or a line a kill cut short."""
        tasks: dict[tuple[str, ...], list[list[str]]] = {}
        for cells in csv.reader(lines):
            tasks.setdefault(tuple(cells[: self.keys]), []).append(cells)
        for lines_of_task in tasks.values():
            if all(c[-1] == str(len(lines_of_task)) for c in lines_of_task):
                rows = [self._row(c) for c in lines_of_task]
                self.done[self.key(rows[0])] = rows
        if self._text() != text:
            self._rewrite()

    def key(self, row: Row) -> Key:
        return tuple(row[c] for c in list(self.columns)[: self.keys])

    def _row(self, cells: list[str]) -> Row:
        """A row from its cells (the count last)."""
        return {c: t(v) for (c, t), v in zip(self.columns.items(), cells[:-1], strict=True)}

    def _lines(self, rows: list[Row]) -> str:
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        for r in rows:
            cells = [
                repr(float(str(r[c]))) if t is float else str(t(r[c]))
                for c, t in self.columns.items()
            ]
            w.writerow([*cells, len(rows)])
        return out.getvalue()

    def _text(self) -> str:
        return self.head + "".join(self._lines(rows) for rows in self.done.values())

    def _rewrite(self) -> None:
        """The file as ``done`` has it, replaced in one step."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(self._text())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def append(self, rows: list[Row]) -> None:
        """A finished task's rows (at least one), in one write."""
        data = self._lines(rows).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            wrote = os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if wrote != len(data):
            raise OSError(f"{self.path}: wrote {wrote} of a task's {len(data)} bytes")
        self.done[self.key(rows[0])] = [
            self._row(c) for c in csv.reader(data.decode().splitlines())
        ]

    def rows(self, keys: Sequence[Key]) -> list[Row]:
        """The rows of the tasks ``keys``, in that order."""
        return [r for k in keys for r in self.done[k]]
