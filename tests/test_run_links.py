"""Link properties of ``make run``: the nftables loss rules, the qdisc
commands, and a loud failure when a property can not be applied."""

from __future__ import annotations

import json
import shutil
import socket
import time

import pytest

from runner import links
from runner.devices.netns import Namespace, entered
from runner.scenario import LinkShape


def test_loss_ruleset_drops_both_ways_and_counts() -> None:
    assert links.loss_ruleset("j1w0-eth0", 5.0) == (
        "table netdev esa_loss {\n"
        "  counter dropped_ingress { }\n"
        "  counter dropped_egress { }\n"
        "  chain ingress {\n"
        '    type filter hook ingress device "j1w0-eth0" priority 0;\n'
        '    numgen random mod 1000000 < 50000 counter name "dropped_ingress" drop\n'
        "  }\n"
        "  chain egress {\n"
        '    type filter hook egress device "j1w0-eth0" priority 0;\n'
        '    numgen random mod 1000000 < 50000 counter name "dropped_egress" drop\n'
        "  }\n"
        "}\n"
    )


@pytest.mark.parametrize(("pct", "threshold"), [(0.0, 0), (0.0001, 1), (1, 10_000), (20, 200_000)])
def test_loss_threshold(pct: float, threshold: int) -> None:
    assert links.loss_threshold(pct) == threshold


def test_dropped_adds_the_tables_counters() -> None:
    listing = {
        "nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"counter": {"family": "netdev", "table": "esa_loss", "name": "dropped_ingress",
                         "packets": 7, "bytes": 700}},
            {"counter": {"family": "netdev", "table": "esa_loss", "name": "dropped_egress",
                         "packets": 5, "bytes": 500}},
            {"counter": {"family": "inet", "table": "other", "name": "x", "packets": 100}},
        ]
    }  # fmt: skip
    assert links.dropped_by_hook(json.dumps(listing)) == {"ingress": 7, "egress": 5}
    assert links.dropped(json.dumps(listing)) == 12


class FakeExec:
    """Records commands; fails those containing ``fail`` with ``message``."""

    def __init__(self, fail: str = "", message: str = "") -> None:
        self.commands: list[str] = []
        self.fail, self.message = fail, message

    def __call__(self, cmd: str) -> tuple[int, str]:
        self.commands.append(cmd)
        if self.fail and self.fail in cmd:
            return 2, self.message
        return 0, ""


def test_shaping_commands() -> None:
    run = FakeExec()
    links.apply_shaping(run, "s1-eth3", LinkShape(bw_mbps=100, delay_ms=2))
    assert run.commands == [
        "tc qdisc add dev s1-eth3 root handle 5: tbf rate 100mbit burst 125000 latency 50ms",
        "tc qdisc add dev s1-eth3 parent 5:1 handle 10: netem delay 2ms",
    ]
    run = FakeExec()
    links.apply_shaping(run, "h-eth0", LinkShape(delay_ms=1.5))
    assert run.commands == ["tc qdisc add dev h-eth0 root handle 10: netem delay 1.5ms"]
    run = FakeExec()
    links.apply_shaping(run, "h-eth0", LinkShape())
    assert run.commands == []


def test_small_bandwidth_keeps_a_burst_of_three_frames() -> None:
    assert "burst 4542 " in links.tbf_command("x", 1.0)


def test_delay_without_netem_is_refused_loudly() -> None:
    run = FakeExec("netem", "Error: Specified qdisc kind is unknown.")
    with pytest.raises(links.LinkError, match="delay needs the kernel's netem qdisc"):
        links.apply_shaping(run, "h-eth0", LinkShape(delay_ms=1))


def test_bandwidth_failure_is_refused_loudly() -> None:
    run = FakeExec("tbf", "Error: Cannot find device")
    with pytest.raises(links.LinkError, match="cannot limit h-eth0 to 10 Mbit/s"):
        links.apply_shaping(run, "h-eth0", LinkShape(bw_mbps=10))


def test_loss_failure_is_refused_loudly() -> None:
    run = FakeExec("nft -f", "Error: Could not process rule: No such file or directory")
    with pytest.raises(links.LinkError, match="cannot apply 5% loss on h-eth0 with nftables"):
        links.apply_loss(run, "h-eth0", 5)


class Pair:
    """A veth between two private namespaces, static neighbours as the run's
    hosts have (ARP would cross the link's loss or queue too)."""

    def __init__(self, name: str) -> None:
        self.host, self.peer = Namespace(name), Namespace("peer")
        self.host.add_veth("h1", "s1")
        self.host.exec("ip", "link", "set", "s1", "netns", self.peer.name)
        self.host.exec("ip", "addr", "add", "10.77.0.1/24", "dev", "h1")
        self.peer.exec("ip", "addr", "add", "10.77.0.2/24", "dev", "s1")
        self.peer.exec("ip", "link", "set", "s1", "up")
        mac_h = self.host.exec("cat", "/sys/class/net/h1/address").strip()
        mac_s = self.peer.exec("cat", "/sys/class/net/s1/address").strip()
        self.host.exec("ip", "neigh", "replace", "10.77.0.2", "lladdr", mac_s, "dev", "h1")
        self.peer.exec("ip", "neigh", "replace", "10.77.0.1", "lladdr", mac_h, "dev", "s1")

    def run(self, cmd: str) -> tuple[int, str]:
        """A shell command in the host's namespace, as ``links.Exec``."""
        try:
            return 0, self.host.exec("bash", "-c", cmd)
        except RuntimeError as e:
            return 1, str(e)

    def send(self, count: int, size: int, gap_s: float) -> int:
        """Datagrams of ``size`` bytes from h1 to s1; how many arrived."""
        with entered(self.host.name):
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with entered(self.peer.name):
            rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("10.77.0.2", 0))
        rx.settimeout(0.5)
        got = 0
        for i in range(count):
            tx.sendto(i.to_bytes(4, "big").ljust(size, b"\0"), rx.getsockname())
            time.sleep(gap_s)
        try:
            while True:
                rx.recv(size)
                got += 1
        except TimeoutError:
            pass
        tx.close()
        rx.close()
        return got

    def delete(self) -> None:
        self.host.delete()
        self.peer.delete()


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (Debian's nftables)")
def test_loss_rules_drop_and_count_for_real() -> None:
    """Half the datagrams each way on a veth between two private namespaces:
    some are dropped, the counters account for every missing one, and the
    rest arrive; all of them on h1's way out (egress)."""
    pair = Pair("loss")
    try:
        links.apply_loss(pair.run, "h1", 50)
        sent = 200
        got = pair.send(sent, 4, 0.001)
        assert 0 < got < sent
        assert links.read_dropped(pair.run) == sent - got
        assert links.read_dropped_by_hook(pair.run) == {"ingress": 0, "egress": sent - got}
    finally:
        pair.delete()


def test_qdisc_drops_add_every_qdisc() -> None:
    listing = [
        {"kind": "tbf", "handle": "5:", "drops": 7, "packets": 90},
        {"kind": "netem", "handle": "10:", "parent": "5:1", "drops": 2},
        {"kind": "noqueue", "handle": "0:"},
    ]
    assert links.qdisc_drops(json.dumps(listing)) == 9


@pytest.mark.netns
def test_a_shaped_links_full_queue_drops_and_counts_for_real() -> None:
    """A burst of 1,000-byte datagrams into a 0.5 Mbit/s link: its queue
    (50 ms at that rate, and one burst) overflows, the qdisc's counter
    accounts for every missing datagram, and the rest arrive."""
    pair = Pair("shape")
    try:
        links.apply_shaping(pair.run, "h1", LinkShape(bw_mbps=0.5))
        sent = 60
        got = pair.send(sent, 1000, 0.0)
        assert 0 < got < sent
        assert links.read_qdisc_drops(pair.run, "h1") == sent - got
    finally:
        pair.delete()
