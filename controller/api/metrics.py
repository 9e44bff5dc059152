"""The controller's counters for Prometheus: ``esa-ctl serve --metrics HOST:PORT``.

A scrape reads what ``esa-ctl stats`` and ``esa-ctl slots`` read, switch by
switch (``Controller.sample``): each job's event counters and the drop
counters of every switch the controller is connected to, and the slot
owners where they can be read (over P4Runtime from the reference switch,
through ``serve --thrift-cli`` from a BMv2, which runs the CLI on each
scrape).  It takes the controller's lock as an
admin request does, one switch at a time, and never reconnects a switch
(the serve loop does that); a switch that is down, or fails a read, is
shown as ``esa_switch_up 0`` with none of its counters, and the others as
usual.  Nothing is cached: each scrape is the switches' counters at that
moment, and the admin API is not involved.

The exposition is ``prometheus_client``'s: a collector of its own
(``ControllerCollector``) in a private registry, served by the library's
HTTP server (``MetricsServer``).  ``METRICS`` is every metric with its type,
labels and meaning; docs/controller.md lists the same ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from controller.device.switch import Counters
from controller.errors import InvalidRequest
from esa.spec import Drop, Event

PREFIX = "esa_"

EVENT_HELP = {
    Event.AGGREGATED: "contributions added into a slot (including the one that claimed it)",
    Event.COMPLETED: "sums completed in the switch",
    Event.FALLBACK: "contributions sent to the PS because no slot could take them",
    Event.PREEMPT_WON: "slots this job's contributions took from lower-priority jobs "
    "or, in its home, from guests",
    Event.PREEMPT_SUFFERED: "partial sums of this job evicted by higher-priority jobs",
    Event.DUPLICATE: "contributions whose worker bit was already in the slot (not added)",
    Event.STALE_RECLAIMED: "stale slots of this job taken over, their partials sent to the PS",
    Event.FLUSHED: "partial sums of this job flushed to the PS by a retransmission",
    Event.SPOOFED: "contributions from a worker outside the job's set, dropped",
    Event.OVERFLOW: "sums that left the switch flagged as overflowed",
    Event.PS_RESULT: "PS-completed results passed through to the workers",
    Event.RELEASED_BY_PS: "slots still holding a chunk that its PS result released",
    Event.IDLE_RECLAIMED: "idle partial sums of this job taken over after the squat timeout, "
    "sent to the PS",
    Event.FOLLOWED: "contributions that followed their chunk's partial to the PS "
    "(also counted as fallback)",
    Event.LENT: "chunks of this job that, their home slot busy, claimed a slot outside "
    "the home (rule L)",
    Event.GUEST_EVICTED: "partial sums of this job, guests in another job's home, evicted "
    "by the home's owner and sent to the PS",
}


def event_metric(event: Event) -> str:
    """The counter of one of a job's events: ``esa_job_aggregated_total``, ..."""
    return f"{PREFIX}job_{event.name.lower()}_total"


@dataclass(frozen=True)
class Spec:
    """One metric as scraped: its name in the exposition, its type, labels
    and meaning."""

    name: str
    kind: str
    """``counter`` or ``gauge``."""
    labels: tuple[str, ...]
    help: str

    @property
    def family(self) -> str:
        """The family's name, as ``prometheus_client`` gives it (a counter's
        without ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


SWITCH_UP = Spec(
    f"{PREFIX}switch_up",
    "gauge",
    ("switch",),
    "1 if the controller is connected to the switch and read its counters in this "
    "scrape, else 0 (its other metrics are then absent)",
)
JOBS_ADMITTED = Spec(
    f"{PREFIX}jobs_admitted", "gauge", (), "jobs the controller has admitted (on any switch)"
)
JOB_PRIORITY = Spec(
    f"{PREFIX}job_priority",
    "gauge",
    ("switch", "job"),
    "the priority of the job's entry on the switch, 0..255 (higher preempts lower under esa)",
)
EVENTS = tuple(Spec(event_metric(e), "counter", ("switch", "job"), EVENT_HELP[e]) for e in Event)
DROPS = Spec(
    f"{PREFIX}drops_total",
    "counter",
    ("switch", "reason"),
    "packets the switch dropped, by reason (" + ", ".join(d.name.lower() for d in Drop) + ")",
)
POOL_SLOTS = Spec(f"{PREFIX}pool_slots", "gauge", ("switch",), "slots in the switch's pool")
SLOTS_USED = Spec(
    f"{PREFIX}slots_used",
    "gauge",
    ("switch",),
    "slots of the pool held by a chunk (where the switch's slot_owner register can be read)",
)
SLOTS_HELD = Spec(
    f"{PREFIX}slots_held",
    "gauge",
    ("switch", "job"),
    "slots of the pool held by the job's chunks (every job with an entry there, and any "
    "other owner)",
)
METRICS: tuple[Spec, ...] = (
    SWITCH_UP,
    JOBS_ADMITTED,
    JOB_PRIORITY,
    *EVENTS,
    DROPS,
    POOL_SLOTS,
    SLOTS_USED,
    SLOTS_HELD,
)
"""Every metric, in the order of the exposition."""


@dataclass(frozen=True)
class SwitchSample:
    """One switch as a scrape found it."""

    up: bool
    """the controller is connected to it and read its counters."""
    priorities: Mapping[int, int] = field(default_factory=dict)
    """the priority of each job's entry there."""
    counters: Counters = field(default_factory=Counters)
    owners: Sequence[int] | None = None
    """the ``slot_owner`` register, where it can be read."""


@dataclass(frozen=True)
class Scrape:
    """What a scrape shows: the controller's jobs and each switch."""

    jobs: int
    pool_size: int
    switches: Mapping[str, SwitchSample]


def families(sample: Scrape) -> list[Metric]:
    """The metric families of one scrape, in ``METRICS`` order."""
    out: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for spec in METRICS:
        cls = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
        out[spec.name] = cls(spec.name, spec.help, labels=spec.labels)
    out[JOBS_ADMITTED.name].add_metric([], sample.jobs)
    for name, sw in sample.switches.items():
        out[SWITCH_UP.name].add_metric([name], int(sw.up))
        if not sw.up:
            continue
        out[POOL_SLOTS.name].add_metric([name], sample.pool_size)
        for job, priority in sorted(sw.priorities.items()):
            out[JOB_PRIORITY.name].add_metric([name, str(job)], priority)
            counts = sw.counters.events.get(job, {})
            for event in Event:
                out[event_metric(event)].add_metric([name, str(job)], counts.get(event, 0))
        for drop in Drop:
            out[DROPS.name].add_metric([name, drop.name.lower()], sw.counters.drops.get(drop, 0))
        if sw.owners is not None:
            held = Counter(o >> 32 for o in sw.owners if o)
            out[SLOTS_USED.name].add_metric([name], sum(held.values()))
            for job in sorted(set(held) | set(sw.priorities)):
                out[SLOTS_HELD.name].add_metric([name, str(job)], held.get(job, 0))
    return list(out.values())


class ControllerCollector:
    """A ``prometheus_client`` collector reading ``source`` on each scrape;
    nothing until a source is attached (the moments between binding the
    address and the controller's start)."""

    def __init__(self) -> None:
        self.source: Callable[[], Scrape] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.source is not None:
            yield from families(self.source())


def metrics_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/metrics"


class MetricsServer:
    """``prometheus_client``'s HTTP server on ``host:port`` (port 0: a free
    one, then ``port`` is the one bound), with a registry of its own holding
    the controller's collector.  Creating it binds the address."""

    def __init__(self, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = ControllerCollector()
        self.registry.register(self.collector)
        try:
            self.httpd, self.thread = start_http_server(port, host, registry=self.registry)
        except OSError as e:
            raise InvalidRequest(
                f"metrics address {metrics_url(host, port)}: cannot listen: {e.strerror or e}"
            ) from None
        self.host = host
        self.port = int(self.httpd.server_port)
        self._stopped = False

    @property
    def url(self) -> str:
        return metrics_url(self.host, self.port)

    def attach(self, source: Callable[[], Scrape]) -> None:
        """Serve what ``source`` returns from now on."""
        self.collector.source = source

    def stop(self) -> None:
        """Stop serving and close the socket (again: nothing)."""
        if self._stopped:
            return
        self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
