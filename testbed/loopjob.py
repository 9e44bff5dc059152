"""One job's switch and PS hosts on 127.0.0.1, for workers that run
elsewhere (other processes) or in this process (``testbed.looprig``): the
switch model behind a UDP socket (``LoopSwitch``) and a ``ParameterServer``
per PS shard, each on a thread, agreeing every call with the workers over
its control socket as ``esa-ps`` does, with a key of its own for the job
(``key``, and ``key_file`` for worker processes: ``ESA_KEY_FILE``).

Workers use the sockets of ``workers`` (bound here, or by whoever passes
their addresses), send every chunk to the switch (``ps_addrs``: the
switch's address once per shard, what ``ESA_PS`` is set to on a loopback
run) and agree their calls with ``control_addrs`` (``ESA_CONTROL``).  Every
socket is bound to port 0 and held from then on: no port is guessed free.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from esa import model
from esa.job import Workers
from esa.spec import DEFAULT_POOL_SIZE, Policy
from hosts.agreement import auth
from hosts.net.transport import Addr, UdpTransport
from hosts.ps.parameter_server import ParameterServer
from testbed.loopswitch import LoopSwitch

LOCAL = "127.0.0.1"
Sockets = Callable[[], UdpTransport]
"""Makes one socket of the rig (a host's data or control socket)."""


def local_socket() -> UdpTransport:
    """A UDP socket on a free port of 127.0.0.1."""
    return UdpTransport((LOCAL, 0))


def ddp_env(rank: int, world: int, master_port: int) -> dict[str, str]:
    """What ``torchrun`` sets for process ``rank`` of ``world`` on this machine,
    plus Gloo on the loopback interface and one compute thread per process.
    ``master_port``: the rendezvous store the launcher holds, as torchrun's
    agent does (``torch.distributed.TCPStore`` on port 0): every process is
    its client, none binds a port of its own for it."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": LOCAL,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }


def _addrs(addrs: tuple[Addr, ...]) -> str:
    return ",".join(f"{host}:{port}" for host, port in addrs)


class LoopJob:
    """Job ``job`` with ``fan_in`` workers and ``shards`` PS hosts on a
    ``pool``-slot switch model that loses ``loss`` of what it forwards.
    ``workers``: the workers' addresses (default: sockets
    this job binds and holds, ``worker_sockets``, for workers that take a
    bound socket); ``sockets`` makes the PS hosts' and those sockets."""

    def __init__(
        self,
        job: int,
        fan_in: int,
        shards: int = 1,
        pool: int = DEFAULT_POOL_SIZE,
        policy: Policy = Policy.ESA,
        loss: float = 0.0,
        stall: float = 0.05,
        workers: list[Addr] | None = None,
        sockets: Sockets = local_socket,
    ) -> None:
        self.job = job
        self.key = auth.new_key()
        self._keys = tempfile.TemporaryDirectory(prefix="esa-loopjob-")
        self.key_file = auth.write_key(Path(self._keys.name) / f"job{job}.key", self.key)
        self.worker_sockets = [] if workers is not None else [sockets() for _ in range(fan_in)]
        self.workers = workers if workers is not None else [t.addr for t in self.worker_sockets]
        self.ps_transports = [sockets() for _ in range(shards)]
        self.ps_controls = [sockets() for _ in range(shards)]
        sw = model.SwitchModel(pool_size=pool, policy=policy)
        sw.add_job(
            job,
            model.JobConfig(
                fan_in, (1 << fan_in) - 1, priority=1, ps_ports=tuple(range(1, shards + 1))
            ),
        )
        self.switch = LoopSwitch(
            sw,
            ps={job: tuple(t.addr for t in self.ps_transports)},
            workers={job: self.workers},
            loss=loss,
        )
        self.pses = [
            ParameterServer(
                self.ps_transports[s], self.switch.addr, {job: Workers.of(fan_in)}, stall=stall,
                control=self.ps_controls[s], shard=s, shards=shards, keys={job: self.key},
            )
            for s in range(shards)
        ]  # fmt: skip
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=ps.serve, args=(self._stop.is_set,), name=f"loopjob-ps{s}", daemon=True
            )
            for s, ps in enumerate(self.pses)
        ]

    @property
    def switch_addr(self) -> Addr:
        return self.switch.addr

    @property
    def ps_addrs(self) -> tuple[Addr, ...]:
        """Where workers address the chunks of each shard: the switch, which
        stands in for the path to every PS."""
        return (self.switch.addr,) * len(self.pses)

    @property
    def control_addrs(self) -> tuple[Addr, ...]:
        return tuple(c.addr for c in self.ps_controls)

    def worker_fd(self, rank: int) -> int:
        """The descriptor of the socket this job holds for worker ``rank``."""
        return self.worker_sockets[rank].sock.fileno()

    def esa_env(self, rank: int) -> dict[str, str]:
        """The ``ESA_*`` variables of worker ``rank`` (``hosts.torch.config``)
        in a process that inherits its socket (``pass_fds=[worker_fd(rank)]``)."""
        return {
            "ESA_JOB": str(self.job),
            "ESA_PS": _addrs(self.ps_addrs),
            "ESA_BIND_FD": str(self.worker_fd(rank)),
            "ESA_CONTROL": _addrs(self.control_addrs),
            "ESA_KEY_FILE": str(self.key_file),
        }

    def __enter__(self) -> LoopJob:
        self.switch.start()
        for t in self._threads:
            t.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self.switch.stop()
        for s in [*self.ps_transports, *self.ps_controls, *self.worker_sockets]:
            s.close()
        self._keys.cleanup()
