"""``esa-ctl serve --metrics``: the controller's counters in Prometheus' text
format, scraped over HTTP and parsed with ``prometheus_client``'s parser.

* ``esa-ctl serve`` against the reference switch (in process, on a unix
  socket; no root): two jobs admitted, frames through the switch's
  pipeline, and the scrapes in between show each job's counters moving by
  exactly what the frames did, with the right labels;
* every metric of ``controller.api.metrics.METRICS`` is served with its type and
  labels, and listed in docs/controller.md; a switch that is down is shown
  as down, and the scrape reconnects nothing;
* a bad ``--metrics`` address is a usage error; one in use is refused
  before the state file is created.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.api.messages import AdmitRequest
from controller.api.metrics import EVENTS, METRICS, MetricsServer, event_metric
from controller.api.service import Controller
from controller.device.memswitch import MemorySwitch
from controller.world.fabric import Device, one_switch
from controller.world.state import Store
from controller.world.topology import Topology
from esa.spec import Drop, Event
from refswitch.server import ServedDevice
from runner.paths import ROOT
from tests import dataplane
from tests.esa_ctl import esa_ctl
from tests.test_controller_cli import esa_ctl_here
from tests.test_controller_service import connector, topology
from tests.test_refswitch import LONG_US, P4INFO, POOL, H, run_steps, steps
from tests.wait import LIMIT_S, until

Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Every sample of a scrape: (sample name, labels) to value."""


def scrape(url: str) -> tuple[str, Scrape]:
    """The exposition at ``url``, and its samples as the library parses them."""
    with urllib.request.urlopen(url, timeout=LIMIT_S) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def one(samples: Scrape, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with exactly these labels."""
    return samples[(name, frozenset(labels.items()))]


def job_counts(samples: Scrape, job: int) -> dict[str, float]:
    """A job's event counters on switch s1, by event."""
    return {e.name.lower(): one(samples, event_metric(e), switch="s1", job=str(job)) for e in Event}


def drops(samples: Scrape) -> dict[str, float]:
    """Switch s1's drop counters, by reason."""
    reasons = [d.name.lower() for d in Drop]
    return {r: one(samples, "esa_drops_total", switch="s1", reason=r) for r in reasons}


def test_a_scrape_during_a_job_shows_its_counters_moving(
    device: tuple[ServedDevice, str], tmp_path: Path
) -> None:
    """``esa-ctl serve --metrics 127.0.0.1:0`` against the reference switch:
    two jobs, then the frames of ``tests.test_refswitch.steps`` (a sum
    completed in the switch, a preemption, a fallback, a PS result, drops)
    through its pipeline.  Scrapes before, during and after them show each
    job's counters moving by exactly what the frames did."""
    dev, addr = device
    topo = tmp_path / "fabric.json"
    # the switch's address, which the PS's copy of a sum it completes comes from
    switch = Device("s1", 0, addr, ip=dataplane.SWITCH_IP, mac="02:00:00:00:00:fe")
    topo.write_text(json.dumps(one_switch(Topology(dict(H)), switch).to_json()))
    admin, log = f"unix:{tmp_path}/admin.sock", tmp_path / "serve.log"
    argv = [sys.executable, "-m", "controller", "--admin", admin, "serve"]
    argv += ["--no-p4json", "--p4info", str(P4INFO), "--pool-size", str(POOL)]
    argv += ["--topology", str(topo), "--db", str(tmp_path / "state.db"), "--interval", "0.1"]
    argv += ["--metrics", "127.0.0.1:0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:

        def bound() -> str:
            assert proc.poll() is None, log.read_text()
            m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)$", log.read_text(), re.M)
            return m[1] if m else ""

        url = until(bound, "serve logs its metrics address")
        until(lambda: esa_ctl(admin, "status").returncode == 0, "the admin API answers")
        long = str(LONG_US)  # the switch's clock decides nothing here
        for cmd in (
            ["policy", "esa", "--layout", "hashed", "--stale-us", long, "--squat-us", long],
            ["admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "1"],
            ["admit", "2", "--workers", "h4", "h5", "--ps", "h6", "--priority", "5"],
        ):
            res = esa_ctl(admin, *cmd)
            assert res.returncode == 0, res.stderr

        # the jobs admitted, no traffic yet: every counter there, at 0
        _, before = scrape(url)
        assert one(before, "esa_switch_up", switch="s1") == 1
        assert one(before, "esa_jobs_admitted") == 2
        assert one(before, "esa_pool_slots", switch="s1") == POOL
        assert one(before, "esa_job_priority", switch="s1", job="1") == 1
        assert one(before, "esa_job_priority", switch="s1", job="2") == 5
        for job in (1, 2):
            assert set(job_counts(before, job).values()) == {0}
            assert one(before, "esa_slots_held", switch="s1", job=str(job)) == 0
        assert set(drops(before).values()) == {0}
        assert one(before, "esa_slots_used", switch="s1") == 0

        clock = iter(range(0, 10**9, 1000))

        def deliver(port: int, frame: bytes) -> dict[int, list[bytes]]:
            assert dev.pipeline is not None
            out: dict[int, list[bytes]] = {}
            for p, f in dev.pipeline.process(port, frame, next(clock)):
                out.setdefault(p, []).append(f)
            return out

        trace = steps()
        # a chunk of job 1 summed in the switch, then job 1 claims a slot
        run_steps(deliver, trace[:3])
        _, during = scrape(url)
        assert {k: n for k, n in job_counts(during, 1).items() if n} == {
            "aggregated": 3,
            "completed": 1,
        }
        assert set(job_counts(during, 2).values()) == {0}
        assert one(during, "esa_slots_held", switch="s1", job="1") == 1
        assert one(during, "esa_slots_used", switch="s1") == 1

        # job 2 preempts that slot, job 1's chunk follows its partial to the
        # PS, a PS result, a PS result from a worker's port, an unknown job
        run_steps(deliver, trace[3:])
        _, after = scrape(url)
        assert {k: n for k, n in job_counts(after, 1).items() if n} == {
            "aggregated": 3,
            "completed": 1,
            "preempt_suffered": 1,
            "fallback": 1,
            "followed": 1,
        }
        assert {k: n for k, n in job_counts(after, 2).items() if n} == {
            "aggregated": 1,
            "preempt_won": 1,
            "ps_result": 1,
            "released_by_ps": 1,
        }
        assert {k: n for k, n in drops(after).items() if n} == {"bad_type": 1, "unknown_job": 1}
        assert one(after, "esa_slots_held", switch="s1", job="1") == 0
        assert one(after, "esa_slots_held", switch="s1", job="2") == 0
        assert one(after, "esa_slots_used", switch="s1") == 0

        # what `esa-ctl stats` reads is what was scraped
        stats = json.loads(esa_ctl(admin, "stats", "--json").stdout)
        for job in (1, 2):
            assert stats["jobs"][str(job)] == job_counts(after, job)
        assert stats["drops"] == drops(after)
    finally:
        proc.terminate()
        assert proc.wait(timeout=LIMIT_S) == 0, log.read_text()


def test_every_metric_is_served_typed_labelled_and_documented(tmp_path: Path) -> None:
    """The controller on an in-memory switch behind a metrics server: each
    family of ``METRICS`` with its type and labels (the slot gauges with no
    sample: this switch serves no slot registers);
    docs/controller.md lists each.  A switch that went away is shown down
    with none of its counters, and the scrape leaves it disconnected."""
    sw = MemorySwitch()
    ctl = Controller(
        Store(tmp_path / "state.db"), one_switch(topology()), 64, {"s1": connector(sw)}
    )
    ctl.sync()
    ctl.admit(AdmitRequest(job=3, workers=("h1", "h2"), ps=("h3",), priority=7))
    sw.drops[Drop.MALFORMED] = 4
    metrics = MetricsServer("127.0.0.1", 0)
    try:
        metrics.attach(ctl.sample)
        assert metrics.url == f"http://127.0.0.1:{metrics.port}/metrics"
        text, samples = scrape(metrics.url)
        served = {f.name: f for f in text_string_to_metric_families(text)}
        assert list(served) == [m.family for m in METRICS]
        for m in METRICS:
            family = served[m.family]
            assert (family.type, family.documentation) == (m.kind, m.help)
            if m.name in ("esa_slots_used", "esa_slots_held"):
                assert family.samples == []
                continue
            assert {s.name for s in family.samples} == {m.name}, m.name
            assert {tuple(sorted(s.labels)) for s in family.samples} == {tuple(sorted(m.labels))}
        assert one(samples, "esa_job_priority", switch="s1", job="3") == 7
        assert one(samples, "esa_drops_total", switch="s1", reason="malformed") == 4
        assert len(EVENTS) == len(Event)

        sw.up = False
        _, down = scrape(metrics.url)
        assert down == {
            ("esa_switch_up", frozenset({("switch", "s1")})): 0,
            ("esa_jobs_admitted", frozenset()): 1,
        }
        assert not ctl.sessions["s1"].connected
        # the connection dropped (as a failed read drops it), the switch back:
        # only the serve loop reconnects
        ctl.sessions["s1"].drop()
        sw.up = True
        _, still = scrape(metrics.url)
        assert still == down
        assert ctl.sessions["s1"].switch is None and sw.closed, "a scrape reconnected"
    finally:
        metrics.stop()
        ctl.store.close()

    doc = (ROOT / "docs" / "controller.md").read_text()
    rows = {
        m[1]: (m[2], m[3])
        for m in re.finditer(r"^\| `(esa_\w+)` \| (counter|gauge) \| ([^|]*) \|", doc, re.M)
    }
    assert rows == {
        m.name: (m.kind, ", ".join(f"`{label}`" for label in m.labels) or "none") for m in METRICS
    }


@pytest.mark.parametrize(
    "addr",
    [
        "9100",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:x",
        ":9100",
        "::1:9100",
        "[127.0.0.1]:9100",
        "example.com:9100",
        "256.0.0.1:9100",
    ],
)
def test_a_bad_metrics_address_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], addr: str
) -> None:
    argv = ["--admin", f"unix:{tmp_path}/admin.sock", "serve", "--metrics", addr]
    assert esa_ctl_here(capsys, [*argv, "--db", f"{tmp_path}/s.db"]) == (
        2,
        "",
        f"esa-ctl serve: error: argument --metrics: metrics address {addr!r}: use HOST:PORT, "
        "HOST an IPv4 address, an IPv6 address in brackets or localhost, PORT 0..65535 "
        "(0: a free one, logged): 127.0.0.1:9100, [::1]:9100, 0.0.0.0:9100 "
        "(see esa-ctl serve --help)\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_metrics_address_in_use_is_refused_before_the_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"hosts": {h.name: h.to_json() for h in H.values()}}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--admin", f"unix:{tmp_path}/admin.sock", "serve", "--switch", "unix:/nowhere"]
        argv += ["--no-p4json", "--p4info", str(P4INFO), "--pool-size", str(POOL)]
        argv += ["--topology", str(topo), "--db", str(tmp_path / "state.db")]
        argv += ["--metrics", f"127.0.0.1:{port}"]
        assert esa_ctl_here(capsys, argv)[::2] == (
            1,
            f"esa-ctl: error: metrics address http://127.0.0.1:{port}/metrics: cannot listen: "
            "Address already in use\n",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topo.json"]
