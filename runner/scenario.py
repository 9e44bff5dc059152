"""A run's scenario: jobs, pool, links, schemes and faults, from a JSON file and flags.

A job arrives ``arrival_s`` after the run starts (it is admitted then, so
static partitions go to jobs in arrival order) and its workers compute
``compute_s`` between iterations, each iteration's time drawn uniformly
within ``jitter`` (a fraction) of it.  ``part_size`` is the size of the
``static`` scheme's fixed partitions (``esa-ctl policy static
--part-size``): the jobs' bandwidth-delay product in chunks, as SwitchML
sizes them; 0 asks for the controller's equal split instead.

The scenario names its topology (``"topology": "single"`` is
``mininet/topologies/single.json``, see ``runner.network``).  A job is
an ``esa.job.JobSpec`` with, if it names its hosts, its
``esa.job.Placement``: ``worker_hosts`` (one per worker) and ``ps_hosts``
(1, 2, 4 or 8 PS hosts, one PS process per shard), both or neither; a job
that names none takes the topology's next free hosts, one of them its PS.
``link`` sets properties on every host's link of the topology, over what
the topology file says.

``train`` says what the jobs' workers run: ``synthetic`` gradients through
``esa-worker`` (the default), or ``torch``: the PyTorch example with DDP and
the ESA hook, or the user's own DDP script (``script``, a file or a module,
with ``script_args``) (``runner.torchjobs``, which says how a job's
fields map onto either).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.api.messages import PolicyRequest
from controller.api.validate import MIN_WORKERS
from controller.world.partition import LAYOUT_NAMES, Layout, layout_named
from esa import arguments, wire
from esa.job import JobSpec, Placement, check_job_id
from esa.schemes import DEFAULT_RUN_SCHEMES, RUN_SCHEMES, Memory, Ranking, Scheme
from esa.spec import Policy, check_squat_us
from runner.faults import Fault, FaultKind, parse_fault
from runner.paths import ROOT


def _esa_first(schemes: tuple[Scheme, ...]) -> tuple[str, ...]:
    """Names in the order a run takes them: ESA first, its ranked scheme
    leading, then the baselines."""
    order = sorted(schemes, key=lambda s: (s.policy is not Policy.ESA, s.ranking is Ranking.ONE))
    return tuple(s.value for s in order)


SCHEMES = _esa_first(RUN_SCHEMES)
"""The run's schemes (``esa.schemes``).  ``static`` is SwitchML: the static
policy with fixed partitions of the scenario's ``part_size``;
``static-equal`` the static policy with the controller's equal split: the
two static baselines.  ``esa`` runs with the equal split too (every job a
home while the pool has one for each, docs/controller.md) and ``atp``
ignores partitions.  ``esa-equal`` is ``esa`` with priorities off: every job
admitted at ``esa.job.EQUAL_PRIORITY`` whatever the scenario says, so none
preempts another and homes go by admission order."""
DEFAULT_SCHEMES = _esa_first(DEFAULT_RUN_SCHEMES)
"""What a scenario runs unless it lists its ``schemes``: ESA against the
three baselines."""
SYNTHETIC, TORCH = "synthetic", "torch"
TRAINS = (SYNTHETIC, TORCH)
SCENARIOS = ROOT / "mininet" / "scenarios"
DEFAULT = SCENARIOS / "default.json"
DEFAULT_TOPOLOGY = "single"


@dataclass(frozen=True)
class RunJob:
    """A job of the scenario: what it trains, and the hosts it names, if any
    (``runner.network.assign`` places the others)."""

    spec: JobSpec
    placement: Placement | None = None


@dataclass(frozen=True)
class LinkShape:
    """The properties a run gives a link (``LINK_FIELDS``): rate, delay, loss."""

    bw_mbps: float | None = None
    delay_ms: float = 0.0
    loss_pct: float = 0.0

    def overridden(self, changes: Mapping[str, float | None]) -> LinkShape:
        """These properties, with ``changes`` (a subset of LINK_FIELDS) applied."""
        delay, loss = changes.get("delay_ms"), changes.get("loss_pct")
        return check_link(
            LinkShape(
                changes.get("bw_mbps", self.bw_mbps),
                self.delay_ms if delay is None else delay,
                self.loss_pct if loss is None else loss,
            )
        )


LINK_FIELDS = ("bw_mbps", "delay_ms", "loss_pct")


@dataclass(frozen=True)
class Scenario:
    jobs: tuple[RunJob, ...]
    pool_size: int = 64
    schemes: tuple[str, ...] = DEFAULT_SCHEMES
    topology: str = DEFAULT_TOPOLOGY
    """a name in mininet/topologies/ or a path to a topology file."""
    link: Mapping[str, float | None] = field(default_factory=dict)
    """link properties (LINK_FIELDS) set on every host's link, over the topology's."""
    stale_us: int = 20_000
    squat_us: int | None = None
    """the squat timeout written with each scheme; None: its switch policy's default."""
    window: int = 32
    rto_s: float = 0.05
    part_size: int = 0
    layout: str = Layout.HOMES.value
    """where ``esa`` and ``esa-equal`` place chunks (``esa-ctl policy esa
    --layout``): homes, as hosts milliseconds apart need (the processes
    around a software switch), or every job hashed over the pool."""
    timeout_s: float = 30.0
    """the workers' allreduce deadline: a job that lost a worker fails after it."""
    stall_s: float | None = None
    """seconds a job may go without progress before it is stopped
    (``runner.stall``); None: ``timeout_s`` and 30 s, and a synthetic
    job's compute time."""
    sample_s: float = 0.25
    """interval of the slot timeline's samples."""
    faults: tuple[Fault, ...] = ()
    description: str = ""
    train: str = SYNTHETIC
    """what the workers run: one of TRAINS."""
    script: str = ""
    """under TORCH: the DDP script each worker runs, a file (absolute) or a
    module; "": the example (``runner.torchjobs``)."""
    script_args: tuple[str, ...] = ()
    """the script's arguments."""


JOB_FIELDS = {
    "job", "workers", "values", "iterations", "priority", "size_hint",
    "arrival_s", "compute_s", "jitter", "worker_hosts", "ps_hosts",
}  # fmt: skip
REQUIRED_JOB_FIELDS = {"job", "workers", "values", "iterations"}
SCENARIO_FIELDS = {
    "description", "pool_size", "schemes", "topology", "link", "stale_us", "squat_us", "window",
    "rto_s", "part_size", "layout", "timeout_s", "stall_s", "sample_s", "faults", "jobs", "train",
    "script", "script_args",
}  # fmt: skip
OLD_SCHEMES = "policies"
"""The older name of ``schemes`` in a scenario file: still read, with a
deprecation message (``deprecated``)."""


def controller_policy(name: str, part_size: int, layout: str) -> PolicyRequest:
    """The controller's policy, partition size and ESA layout behind the
    run's scheme ``name`` (``part_size``: the scenario's, SwitchML's),
    timeouts left to the caller."""
    scheme = Scheme(name)
    return PolicyRequest(
        scheme.policy.name.lower(),
        part_size=part_size if scheme.memory is Memory.FIXED else 0,
        layout=layout if scheme.policy is Policy.ESA else None,
    )


def layout_note(s: Scenario, scheme: str) -> str:
    """``", layout hashed"`` where a scheme of the ESA policy runs the hashed
    layout, else nothing (homes, the default, goes unsaid)."""
    esa = Scheme(scheme).policy is Policy.ESA
    return f", layout {s.layout}" if esa and s.layout != Layout.HOMES.value else ""


def _error(msg: str) -> ValueError:
    return ValueError(f"scenario: {msg}")


def deprecated(old: str, new: str) -> None:
    """Say on stderr that ``old``, an older name of ``new``, is read as ``new``."""
    print(
        f"scenario: {old} is deprecated, read as {new}: a run compares schemes "
        "(esa.schemes); a policy is the switch's rule set (esa-ctl policy)",
        file=sys.stderr,
    )


def listed_schemes(raw: dict[str, Any]) -> tuple[str, ...]:
    """The schemes a scenario file lists: its ``schemes``, or its
    ``policies`` (OLD_SCHEMES) where the file, or the run that wrote it, is
    older than the word; DEFAULT_SCHEMES without either."""
    if OLD_SCHEMES in raw and "schemes" in raw:
        raise _error(f'give "schemes" or its old name "{OLD_SCHEMES}", not both')
    return tuple(raw.get("schemes", raw.get(OLD_SCHEMES, DEFAULT_SCHEMES)))


def _host_names(raw: dict[str, Any], key: str) -> tuple[str, ...]:
    names = raw[key]
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise _error(f"job {raw.get('job')}: {key} must be a list of host names")
    return tuple(names)


def _placement(raw: dict[str, Any], spec: JobSpec) -> Placement | None:
    named = {"worker_hosts", "ps_hosts"} & set(raw)
    if not named:
        return None
    if len(named) == 1:
        raise _error(f"job {spec.job}: name both worker_hosts and ps_hosts, or neither")
    workers, ps = _host_names(raw, "worker_hosts"), _host_names(raw, "ps_hosts")
    if len(workers) != spec.workers:
        raise _error(f"job {spec.job}: {len(workers)} worker_hosts for {spec.workers} workers")
    try:
        return Placement(workers, ps)
    except ValueError as e:
        raise _error(f"job {spec.job}: {e}") from None


def parse_job(raw: dict[str, Any]) -> RunJob:
    unknown = set(raw) - JOB_FIELDS
    if unknown:
        raise _error(f"job entry has unknown field(s): {', '.join(sorted(unknown))}")
    missing = sorted(REQUIRED_JOB_FIELDS - set(raw))
    if missing:
        raise _error(f"job {raw.get('job', '(no id)')}: missing field(s) {', '.join(missing)}")
    workers = int(raw["workers"])
    if not MIN_WORKERS <= workers <= wire.MAX_WORKERS:
        raise _error(f"job {raw['job']}: workers must be {MIN_WORKERS}..{wire.MAX_WORKERS}")
    try:
        spec = JobSpec(
            job=check_job_id(int(raw["job"])),
            workers=workers,
            values=int(raw["values"]),
            iterations=int(raw["iterations"]),
            priority=None if raw.get("size_hint") else int(raw.get("priority", 0)),
            arrival_s=float(raw.get("arrival_s", 0.0)),
            compute_s=float(raw.get("compute_s", 0.0)),
            jitter=float(raw.get("jitter", 0.0)),
        )
    except ValueError as e:
        raise _error(str(e)) from None
    return RunJob(spec, _placement(raw, spec))


def job_json(j: RunJob) -> dict[str, Any]:
    """A job as a scenario file gives it (``parse_job`` reads it back)."""
    spec = j.spec
    out: dict[str, Any] = {
        "job": spec.job,
        "workers": spec.workers,
        "values": spec.values,
        "iterations": spec.iterations,
        **({"size_hint": True} if spec.priority is None else {"priority": spec.priority}),
        "arrival_s": spec.arrival_s,
        "compute_s": spec.compute_s,
        "jitter": spec.jitter,
    }
    if j.placement is not None:
        out["worker_hosts"] = list(j.placement.workers)
        out["ps_hosts"] = list(j.placement.ps)
    return out


def parse_link(raw: dict[str, Any]) -> dict[str, float | None]:
    """The link properties ``raw`` gives (bw_mbps may be null: unlimited)."""
    unknown = set(raw) - set(LINK_FIELDS)
    if unknown:
        raise _error(f"link has unknown field(s): {', '.join(sorted(unknown))}")
    changes: dict[str, float | None] = {}
    for name, value in raw.items():
        if value is None and name != "bw_mbps":
            raise _error(f"link {name} must be a number")
        changes[name] = None if value is None else float(value)
    LinkShape().overridden(changes)
    return changes


def check_link(link: LinkShape) -> LinkShape:
    if link.bw_mbps is not None and link.bw_mbps <= 0:
        raise _error("link bandwidth must be positive (Mbit/s)")
    if link.delay_ms < 0:
        raise _error("link delay must be >= 0 ms")
    if not 0 <= link.loss_pct < 100:
        raise _error("link loss must be a percentage in [0, 100)")
    return link


def check(s: Scenario) -> Scenario:
    """Whole-scenario rules: distinct jobs, known schemes, sizes, faults' targets."""
    if not s.jobs:
        raise _error("no jobs")
    if len({j.spec.job for j in s.jobs}) != len(s.jobs):
        raise _error("job ids must be distinct")
    bad = [name for name in s.schemes if name not in SCHEMES]
    if bad:
        raise _error(f"unknown scheme {bad[0]!r} (known: {', '.join(SCHEMES)})")
    if s.pool_size < 1 or s.window < 1:
        raise _error("pool_size and window must be positive")
    if s.squat_us is not None:
        try:
            check_squat_us(s.squat_us)
        except ValueError as e:
            raise _error(f"squat_us: {e}; 0 = off, absent = the policy's default") from None
    if not 0 <= s.part_size <= s.pool_size:
        raise _error(f"part_size must be 0..pool_size ({s.pool_size}); 0 = equal split")
    try:
        layout_named(s.layout)
    except ValueError as e:
        raise _error(f"layout: {e}") from None
    if s.timeout_s <= 0 or s.sample_s <= 0 or s.rto_s <= 0:
        raise _error("timeout_s, sample_s and rto_s must be positive")
    if s.stall_s is not None and s.stall_s <= 0:
        raise _error("stall_s must be positive (absent: timeout_s + 30 s)")
    if s.train not in TRAINS:
        raise _error(f"unknown train {s.train!r} (known: {', '.join(TRAINS)})")
    check_script(s)
    specs = {j.spec.job: j.spec for j in s.jobs}
    for f in s.faults:
        if f.kind is FaultKind.KILL_WORKER:
            job = specs.get(f.job)
            if job is None:
                raise _error(f"fault {f}: no job {f.job}")
            if not 0 <= f.index < job.workers:
                raise _error(f"fault {f}: job {f.job} has workers 0..{job.workers - 1}")
    return s


def is_script_file(script: str) -> bool:
    """Whether ``script`` names a file (it ends in .py or has a directory),
    not a module."""
    return script.endswith(".py") or "/" in script


def script_as_run(script: str) -> str:
    """``script`` as the workers find it from the project's directory, where
    they run: a file's path made absolute (from the current directory), a
    module's name as it is."""
    return str(Path(script).resolve()) if is_script_file(script) else script


def module_found(name: str) -> bool:
    """Whether ``python -m name`` in the project's directory finds a module
    (looked up without importing anything)."""
    path: list[str] | None = [str(ROOT), *sys.path]
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return False
    for i in range(len(parts)):
        if path is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            return False
        locations = spec.submodule_search_locations
        path = None if locations is None else list(locations)
    return True


def check_script(s: Scenario) -> None:
    """A script needs ``train`` torch, and a file or module that exists."""
    if not s.script:
        if s.script_args:
            raise _error("script_args without a script")
        return
    if s.train != TORCH:
        raise _error(f"script {s.script}: a script runs under train torch (--train torch)")
    if is_script_file(s.script):
        if not Path(s.script).is_file():
            raise _error(f"script {s.script}: no such file")
    elif not module_found(s.script):
        raise _error(f"script {s.script}: no such file or module (a file's name ends in .py)")


def _script_args(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise _error("script_args must be a list of strings")
    return tuple(raw)


def load(path: Path) -> Scenario:
    return from_json(json.loads(path.read_text()))


def from_json(raw: dict[str, Any]) -> Scenario:
    unknown = set(raw) - SCENARIO_FIELDS - {OLD_SCHEMES}
    if unknown:
        raise _error(f"unknown field(s): {', '.join(sorted(unknown))}")
    if OLD_SCHEMES in raw:
        deprecated(f'"{OLD_SCHEMES}"', '"schemes"')
    return check(
        Scenario(
            jobs=tuple(parse_job(j) for j in raw.get("jobs", [])),
            pool_size=int(raw.get("pool_size", 64)),
            schemes=listed_schemes(raw),
            topology=str(raw.get("topology", DEFAULT_TOPOLOGY)),
            link=parse_link(raw.get("link", {})),
            stale_us=int(raw.get("stale_us", 20_000)),
            squat_us=None if raw.get("squat_us") is None else int(raw["squat_us"]),
            window=int(raw.get("window", 32)),
            rto_s=float(raw.get("rto_s", 0.05)),
            part_size=int(raw.get("part_size", 0)),
            layout=str(raw.get("layout", Layout.HOMES.value)),
            timeout_s=float(raw.get("timeout_s", 30.0)),
            stall_s=None if raw.get("stall_s") is None else float(raw["stall_s"]),
            sample_s=float(raw.get("sample_s", 0.25)),
            faults=tuple(parse_fault(f) for f in raw.get("faults", [])),
            description=str(raw.get("description", "")),
            train=str(raw.get("train", SYNTHETIC)),
            script=script_as_run(str(raw.get("script", ""))) if raw.get("script") else "",
            script_args=_script_args(raw.get("script_args", [])),
        )
    )


def _fault_arg(text: str) -> Fault:
    try:
        return parse_fault(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_overrides(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pool", type=arguments.POOL_SIZE, help="slots in the switch")
    ap.add_argument("--schemes", help=f"comma-separated subset of {','.join(SCHEMES)}")
    ap.add_argument("--policies", help="deprecated: the old name of --schemes")
    ap.add_argument("--iterations", type=arguments.COUNT, help="iterations of every job")
    ap.add_argument("--scale", type=float, help="multiply every job's tensor size")
    ap.add_argument(
        "--part-size", type=int, help="static (SwitchML) partition size, slots (0: equal split)"
    )
    ap.add_argument(
        "--layout",
        choices=LAYOUT_NAMES,
        help="where esa places chunks: homes (the default; hosts milliseconds apart) or "
        "hashed (every job over the pool, the simulator's esa)",
    )
    ap.add_argument(
        "--squat-us",
        type=arguments.SQUAT_US,
        help="squat timeout for every scheme, us (0: off; default: each's)",
    )
    ap.add_argument(
        "--timeout",
        type=arguments.seconds("timeout"),
        help="the workers' allreduce deadline, seconds",
    )
    ap.add_argument(
        "--stall",
        type=arguments.seconds("stall"),
        help="stop a job that sums no step and moves no chunk through the switch for this "
        "long, seconds (default: the allreduce deadline + 30 s, + a synthetic job's compute)",
    )
    ap.add_argument(
        "--topology",
        help="topology: a name in mininet/topologies/ or a file (default: the scenario's)",
    )
    ap.add_argument("--bw", type=float, help="link bandwidth, Mbit/s")
    ap.add_argument("--delay", type=float, help="link delay, ms")
    ap.add_argument("--loss", type=float, help="link loss, percent (each direction)")
    ap.add_argument(
        "--train",
        choices=TRAINS,
        help="what the workers run: synthetic gradients, or torch: DDP with the ESA hook, "
        "running the PyTorch example (examples/torch_digits.py, one epoch per iteration) "
        "or your own script (--script)",
    )
    ap.add_argument(
        "--script",
        metavar="FILE|MODULE",
        help="with --train torch: the DDP script each worker runs instead of the example, a "
        "file (.py) or a module; it registers the ESA hook (hosts.torch.hook.register)",
    )
    ap.add_argument(
        "--script-args",
        metavar="ARGS",
        help="the script's arguments, one string split as a shell does "
        "(--script-args='--epochs 3')",
    )
    ap.add_argument(
        "--fault",
        type=_fault_arg,
        action="append",
        default=[],
        help="inject a fault in each scheme's run: bmv2-restart[=SWITCH]@T, controller-restart@T, "
        "kill-worker=JOB:IDX@T (T: seconds after the first job starts); repeatable",
    )


def apply_overrides(s: Scenario, args: argparse.Namespace) -> Scenario:
    if args.pool is not None:
        s = replace(s, pool_size=args.pool)
    if args.policies:
        if args.schemes:
            raise _error("give --schemes or its old name --policies, not both")
        deprecated("--policies", "--schemes")
    names = args.schemes or args.policies
    if names:
        s = replace(s, schemes=tuple(names.split(",")))
    if args.iterations is not None:
        s = with_specs(s, lambda j: replace(j, iterations=args.iterations))
    if args.scale is not None:
        s = with_specs(s, lambda j: replace(j, values=max(1, int(j.values * args.scale))))
    if args.part_size is not None:
        s = replace(s, part_size=args.part_size)
    if args.layout is not None:
        s = replace(s, layout=args.layout)
    if args.squat_us is not None:
        s = replace(s, squat_us=args.squat_us)
    if args.timeout is not None:
        s = replace(s, timeout_s=args.timeout)
    if args.stall is not None:
        s = replace(s, stall_s=args.stall)
    if args.topology:
        s = replace(s, topology=args.topology)
    if args.train:
        s = replace(s, train=args.train)
    if args.script:
        s = replace(s, script=script_as_run(args.script))
    if args.script_args is not None:
        try:
            s = replace(s, script_args=tuple(shlex.split(args.script_args)))
        except ValueError as e:
            raise _error(f"script_args {args.script_args!r}: {e}") from None
    flags = {"bw_mbps": args.bw, "delay_ms": args.delay, "loss_pct": args.loss}
    link = {**s.link, **{k: v for k, v in flags.items() if v is not None}}
    LinkShape().overridden(link)
    s = replace(s, link=link, faults=(*s.faults, *args.fault))
    return check(s)


def with_specs(s: Scenario, change: Callable[[JobSpec], JobSpec]) -> Scenario:
    """``s`` with ``change`` applied to every job's spec (their hosts kept)."""
    return replace(s, jobs=tuple(replace(j, spec=change(j.spec)) for j in s.jobs))


def as_json(s: Scenario) -> dict[str, Any]:
    """The scenario as a scenario file gives it (``from_json`` reads it back)."""
    out = asdict(s)
    out["jobs"] = [job_json(j) for j in s.jobs]
    out["link"] = dict(s.link)
    out["faults"] = [str(f) for f in s.faults]
    out["script_args"] = list(s.script_args)
    return out
