"""Mastership of the reference switch's P4Runtime streams, by PI's rules.

Each ``StreamChannel`` that sends an arbitration becomes a connection with
an election id; the highest is primary.  As in PI (the P4Runtime server
inside ``simple_switch_grpc``): a new or changed connection hears whether it
is primary (``OK``) or backup (``ALREADY_EXISTS``), every connection hears it
when the primary changes, two connections may not share an election id,
and only the primary's election id may write.  With no connection at all a
request without an election id is let through, as PI does for debugging.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from refswitch.tables import Refused

ElectionId = tuple[int, int]


class Connection:
    """One stream: the messages waiting to be sent on it (None ends it)."""

    def __init__(self) -> None:
        self.out: queue.Queue[Any] = queue.Queue()
        self.election_id: ElectionId | None = None


class Arbiter:
    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._conns: list[Connection] = []
        """highest election id first: ``_conns[0]`` is the primary."""

    def arbitrate(self, conn: Connection, arbitration: Any) -> None:
        """Take an arbitration message of ``conn``'s stream (raises ``Refused``)."""
        if arbitration.device_id != self.device_id:
            raise Refused(
                grpc.StatusCode.NOT_FOUND,
                f"no device {arbitration.device_id}: this switch is device {self.device_id}",
            )
        eid = (arbitration.election_id.high, arbitration.election_id.low)
        with self._lock:
            was_primary = bool(self._conns) and self._conns[0] is conn
            if conn in self._conns:
                if conn.election_id == eid:
                    return
                self._conns.remove(conn)
            if any(c.election_id == eid for c in self._conns):
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "Election id already exists")
            conn.election_id = eid
            self._conns.append(conn)
            self._conns.sort(key=lambda c: c.election_id or (0, 0), reverse=True)
            if (self._conns[0] is conn) != was_primary:
                for c in self._conns:
                    self._notify(c)
            else:
                self._notify(conn)

    def remove(self, conn: Connection) -> None:
        """The stream of ``conn`` ended."""
        with self._lock:
            if conn not in self._conns:
                return
            was_primary = self._conns[0] is conn
            self._conns.remove(conn)
            if was_primary:
                for c in self._conns:
                    self._notify(c)

    def check_primary(self, request: Any) -> None:
        """Refuse a Write or SetForwardingPipelineConfig not from the primary."""
        given = request.HasField("election_id")
        eid = (request.election_id.high, request.election_id.low)
        with self._lock:
            allowed = self._conns[0].election_id == eid if self._conns else not given
        if not allowed:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, "Not primary")

    def _notify(self, conn: Connection) -> None:
        primary = self._conns[0]
        rep = p4runtime_pb2.StreamMessageResponse()
        rep.arbitration.device_id = self.device_id
        rep.arbitration.election_id.high, rep.arbitration.election_id.low = primary.election_id or (
            0,
            0,
        )
        if conn is primary:
            rep.arbitration.status.code, rep.arbitration.status.message = code_pb2.OK, "Is primary"
        else:
            rep.arbitration.status.code = code_pb2.ALREADY_EXISTS
            rep.arbitration.status.message = "Is backup"
        conn.out.put(rep)
