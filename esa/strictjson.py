"""JSON that refuses a key given twice: the plain decoder keeps the last,
silently, so a file or a request that names a field twice would mean one of
them without saying which."""

from __future__ import annotations

from typing import Any


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` that raises ``ValueError`` on a
    key given twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} given twice")
        out[key] = value
    return out
