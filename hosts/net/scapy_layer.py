"""Scapy layer for the ESA header and its K values, built from ``esa.wire``.

For crafting and dissecting packets in tests and captures; never on the fast
path (see ``hosts.net.payload``).
"""

from __future__ import annotations

from typing import Any, cast

from scapy.fields import (
    ByteEnumField,
    ByteField,
    Field,
    FieldListField,
    IntField,
    ShortField,
    SignedIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from esa import wire

_BY_WIDTH: dict[int, type[Field[Any, Any]]] = {8: ByteField, 16: ShortField, 32: IntField}


def _field(f: wire.Field) -> Field[Any, Any]:
    if f.name == "ptype":
        names = {int(p): p.name for p in wire.PacketType}
        return ByteEnumField(f.name, 0, names)
    return _BY_WIDTH[f.bits](f.name, 0)


class ESA(Packet):
    name = "ESA"
    fields_desc = [  # noqa: RUF012 (Scapy reads this class attribute)
        *(_field(f) for f in wire.HEADER),
        FieldListField(
            "values",
            cast(Any, [0] * wire.K),
            SignedIntField("value", 0),
            count_from=lambda _p: wire.K,
        ),
    ]


bind_layers(UDP, ESA, dport=wire.UDP_PORT)
bind_layers(UDP, ESA, sport=wire.UDP_PORT)
