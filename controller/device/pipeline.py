"""Facts about the compiled program the controller needs before connecting."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from controller.errors import InvalidRequest
from esa.p4names import SLOT_OWNER


def pool_size_of(bmv2_json: Path) -> int:
    """The slot pool size compiled into a BMv2 JSON (``make build POOL=n``)."""
    try:
        program = json.loads(bmv2_json.read_bytes())
    except FileNotFoundError as e:
        raise InvalidRequest(
            f"cannot read the BMv2 JSON {bmv2_json}: {e} (`make build` compiles it; "
            "the reference switch needs none: serve --no-p4json)"
        ) from None
    except OSError as e:
        raise InvalidRequest(f"cannot read the BMv2 JSON {bmv2_json}: {e}") from None
    except ValueError as e:
        raise InvalidRequest(f"the BMv2 JSON {bmv2_json} is not JSON: {e}") from None
    registers = program.get("register_arrays") if isinstance(program, dict) else None
    for reg in registers if isinstance(registers, list) else []:
        if isinstance(reg, dict) and reg.get("name") == SLOT_OWNER:
            size = reg.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise InvalidRequest(f"{bmv2_json}: register {SLOT_OWNER} has size {size!r}")
            return size
    raise InvalidRequest(f"{bmv2_json} has no register {SLOT_OWNER}: not an ESA program")


def check_p4info(p4info: Path) -> None:
    """The P4Info text file is readable and parses (it is pushed on connect)."""
    try:
        text_format.Merge(p4info.read_text(), p4info_pb2.P4Info(), allow_unknown_field=True)
    except OSError as e:
        raise InvalidRequest(f"cannot read the P4Info {p4info}: {e}") from None
    except (ValueError, text_format.ParseError) as e:
        raise InvalidRequest(f"the P4Info {p4info} is not P4Info text: {e}") from None


def resolve_pool_size(*sizes: tuple[str, int | None]) -> int:
    """The one pool size all given sources agree on (named for the error)."""
    given = [(src, n) for src, n in sizes if n is not None]
    if not given:
        raise InvalidRequest(
            "pool size unknown: give --pool-size or the topology's pool_size "
            "(no BMv2 JSON states it)"
        )
    first_src, first = given[0]
    for src, n in given[1:]:
        if n != first:
            raise InvalidRequest(f"pool size {n} from {src} differs from {first} from {first_src}")
    return first
