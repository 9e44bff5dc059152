"""The one check of an integer against its range, and its message.

The command lines (``esa.arguments``) and the controller's request checks
(``controller.api.validate``) both call the range checks built on it
(``esa.job.check_priority``, ``esa.spec.check_stale_us``, ...), so a value
is refused in the same words wherever it comes from.
"""

from __future__ import annotations


def check_range(what: str, value: object, lo: int, hi: int, shown: str = "") -> int:
    """``value`` if it is an int (a ``bool`` is not) in ``lo..hi``; else a
    ``ValueError`` naming ``what`` and the range (``shown``, or ``lo..hi``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{what} {value!r} is out of range ({shown or f'{lo}..{hi}'})")
    return value
