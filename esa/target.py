"""What a P4Runtime target and its controller agree on beyond the P4Info:
the kinds of write, and the device config of the reference switch, which
runs the program without a BMv2 JSON."""

from __future__ import annotations

import enum
import json

from esa.p4names import SLOT_OWNER


class Op(enum.Enum):
    """A P4Runtime write's kind."""

    INSERT = "insert"
    MODIFY = "modify"
    DELETE = "delete"


def device_config(pool_size: int) -> bytes:
    """The device config of the reference switch (``refswitch.main``): the
    least JSON that states the slot pool's size where a BMv2 JSON does
    (``controller.device.pipeline.pool_size_of`` reads it)."""
    return json.dumps({"register_arrays": [{"name": SLOT_OWNER, "size": pool_size}]}).encode()
