"""One job's switch and PS hosts on 127.0.0.1, for workers that run
elsewhere (other processes) or in this process (``testbed.looprig``): the
switch model behind a UDP socket (``LoopSwitch``) and a ``ParameterServer``
per PS shard, each on a thread, agreeing every call with the workers over
its control socket as ``esa-ps`` does.

Workers bind the addresses in ``workers``, send every chunk to the switch
(``ps_addrs``: the switch's address once per shard, what ``ESA_PS`` is set
to on a loopback run) and agree their calls with ``control_addrs``
(``ESA_CONTROL``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from types import TracebackType

from esa import model
from esa.job import Workers
from esa.spec import DEFAULT_POOL_SIZE, Policy
from hosts.ps import ParameterServer
from hosts.transport import Addr, UdpTransport
from testbed.loopswitch import LoopSwitch

LOCAL = "127.0.0.1"
Sockets = Callable[[], UdpTransport]
"""Makes one socket of the rig (a host's data or control socket)."""


def local_socket() -> UdpTransport:
    """A UDP socket on a free port of 127.0.0.1."""
    return UdpTransport((LOCAL, 0))


def free_port(kind: socket.SocketKind = socket.SOCK_DGRAM) -> int:
    """A port on 127.0.0.1 that is free now (UDP by default)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOCAL, 0))
        return int(s.getsockname()[1])


def ddp_env(rank: int, world: int, master_port: int) -> dict[str, str]:
    """What ``torchrun`` sets for process ``rank`` of ``world`` on this machine,
    plus Gloo on the loopback interface and one compute thread per process."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": LOCAL,
        "MASTER_PORT": str(master_port),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }


def _addrs(addrs: tuple[Addr, ...]) -> str:
    return ",".join(f"{host}:{port}" for host, port in addrs)


class LoopJob:
    """Job ``job`` with ``fan_in`` workers and ``shards`` PS hosts on a
    ``pool``-slot switch model that loses ``loss`` of what it forwards.
    ``agree``: the PS hosts agree calls (False: they have no control socket
    to answer on).  ``workers``: the workers' addresses (default: free
    ports); ``sockets`` makes the PS hosts' sockets."""

    def __init__(
        self,
        job: int,
        fan_in: int,
        shards: int = 1,
        pool: int = DEFAULT_POOL_SIZE,
        policy: Policy = Policy.ESA,
        loss: float = 0.0,
        stall: float = 0.05,
        agree: bool = True,
        workers: list[Addr] | None = None,
        sockets: Sockets = local_socket,
    ) -> None:
        self.job = job
        self.workers = workers or [(LOCAL, free_port()) for _ in range(fan_in)]
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
                control=self.ps_controls[s] if agree else None, shard=s, shards=shards,
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

    def esa_env(self, rank: int) -> dict[str, str]:
        """The ``ESA_*`` variables of worker ``rank`` (``hosts.torch_config``)."""
        return {
            "ESA_JOB": str(self.job),
            "ESA_PS": _addrs(self.ps_addrs),
            "ESA_BIND": _addrs((self.workers[rank],)),
            "ESA_CONTROL": _addrs(self.control_addrs),
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
        for s in [*self.ps_transports, *self.ps_controls]:
            s.close()
