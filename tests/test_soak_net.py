"""The soak's reorder burst (``bench.soak_net``) reorders and loses nothing:
numbered datagrams sent through the soak's namespace while a share of them
goes to the loopback's slow htb class arrive out of order, every one
exactly once; without the rule they arrive in order and none is held.

A held datagram waits about 1 ms a datagram ahead of it in the slow class,
while the whole burst is sent in a few ms: the datagrams sent after a held
one overtake it unless the sender stops for longer than the class's whole
queue takes to drain, between every two of its sends."""

from __future__ import annotations

import socket

import pytest

from bench.soak_net import Net, missing_net
from runner.devices.netns import entered

COUNT = 300
PAYLOAD = 200
SHARE = 25
SO_RCVBUFFORCE = 33
"""Linux's, which Python's socket module does not name: a receive buffer
past ``rmem_max`` (root), for every datagram at once."""
DRAIN_S = 10.0
"""How long the receiver waits for the last datagram: the slow class drains
the share in about 0.1 s."""

pytestmark = pytest.mark.skipif(missing_net() is not None, reason=missing_net() or "")


def send_numbered(net: Net) -> list[int]:
    """``COUNT`` numbered datagrams sent at once in the namespace, and the
    numbers in the order they arrived."""
    with entered(net.name):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(DRAIN_S)
        for n in range(COUNT):
            tx.sendto(n.to_bytes(4, "big") + bytes(PAYLOAD - 4), rx.getsockname())
        got: list[int] = []
        try:
            while len(got) < COUNT:
                got.append(int.from_bytes(rx.recv(PAYLOAD)[:4], "big"))
        except TimeoutError:
            pass
    return got


def late(arrivals: list[int]) -> int:
    """Arrivals of a number below one that arrived before it."""
    highest, out = -1, 0
    for n in arrivals:
        out += n < highest
        highest = max(highest, n)
    return out


def test_a_reorder_burst_reorders_and_loses_nothing() -> None:
    net = Net()
    try:
        before = net.slow_class()
        assert before.sent == before.dropped == before.queued == 0
        rule = net.reorder(SHARE)
        arrivals = send_numbered(net)
        net.delete(rule)
        after = net.slow_class()
        assert sorted(arrivals) == list(range(COUNT))
        assert 0 < late(arrivals) <= after.sent < COUNT
        assert after.dropped == after.queued == 0
        assert send_numbered(net) == list(range(COUNT))
        assert net.slow_class() == after
    finally:
        net.close()
    assert not net.left()
