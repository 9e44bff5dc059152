"""Facts about the compiled program the controller needs before connecting."""

from __future__ import annotations

import json
from pathlib import Path

from controller.errors import InvalidRequest
from controller.switch import SLOT_OWNER


def pool_size_of(bmv2_json: Path) -> int:
    """The slot pool size compiled into a BMv2 JSON (``make build POOL=n``)."""
    try:
        program = json.loads(bmv2_json.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InvalidRequest(f"cannot read the BMv2 JSON {bmv2_json}: {e}") from None
    for reg in program.get("register_arrays", []):
        if reg.get("name") == SLOT_OWNER:
            return int(reg["size"])
    raise InvalidRequest(f"{bmv2_json} has no register {SLOT_OWNER}: not an ESA program")


def resolve_pool_size(*sizes: tuple[str, int | None]) -> int:
    """The one pool size all given sources agree on (named for the error)."""
    given = [(src, n) for src, n in sizes if n is not None]
    if not given:
        raise InvalidRequest("pool size unknown: give --p4json, --pool-size or pool_size")
    first_src, first = given[0]
    for src, n in given[1:]:
        if n != first:
            raise InvalidRequest(f"pool size {n} from {src} differs from {first} from {first_src}")
    return first
