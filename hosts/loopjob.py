"""One job's switch and PS on 127.0.0.1 for workers that run elsewhere
(other processes): the switch model behind a UDP socket (``LoopSwitch``) and
a ``ParameterServer`` on a thread, which agrees every call with the workers
over its control socket, as ``esa-ps`` does.

Workers bind the addresses in ``workers``, send to ``switch_addr`` (what
``ESA_PS`` is set to on a loopback run) and agree their calls with
``control_addr`` (``ESA_CONTROL``).
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

from esa import model
from esa.job import Workers
from esa.spec import DEFAULT_POOL_SIZE, Policy
from hosts.loopswitch import LoopSwitch
from hosts.ps import ParameterServer
from hosts.transport import Addr, UdpTransport

LOCAL = "127.0.0.1"


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


class LoopJob:
    """Job ``job`` with ``fan_in`` workers on a ``pool``-slot switch model."""

    def __init__(
        self,
        job: int,
        fan_in: int,
        pool: int = DEFAULT_POOL_SIZE,
        policy: Policy = Policy.ESA,
        loss: float = 0.0,
    ) -> None:
        self.job = job
        self.workers: list[Addr] = [(LOCAL, free_port()) for _ in range(fan_in)]
        self.ps_transport = UdpTransport((LOCAL, 0))
        self.ps_control = UdpTransport((LOCAL, 0))
        sw = model.SwitchModel(pool_size=pool, policy=policy)
        sw.add_job(job, model.JobConfig(fan_in, (1 << fan_in) - 1, priority=1, ps_port=1))
        self.switch = LoopSwitch(
            sw, ps={job: self.ps_transport.addr}, workers={job: self.workers}, loss=loss
        )
        self.ps = ParameterServer(
            self.ps_transport,
            self.switch.addr,
            {job: Workers.of(fan_in)},
            stall=0.05,
            control=self.ps_control,
        )
        self._stop = threading.Event()
        self._ps_thread = threading.Thread(
            target=self.ps.serve, args=(self._stop.is_set,), name="loopjob-ps", daemon=True
        )

    @property
    def switch_addr(self) -> Addr:
        return self.switch.addr

    @property
    def control_addr(self) -> Addr:
        return self.ps_control.addr

    def esa_env(self, rank: int) -> dict[str, str]:
        """The ``ESA_*`` variables of worker ``rank`` (``hosts.torch_config``)."""
        return {
            "ESA_JOB": str(self.job),
            "ESA_PS": "{}:{}".format(*self.switch_addr),
            "ESA_BIND": "{}:{}".format(*self.workers[rank]),
            "ESA_CONTROL": "{}:{}".format(*self.control_addr),
        }

    def __enter__(self) -> LoopJob:
        self.switch.start()
        self._ps_thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._ps_thread.join()
        self.switch.stop()
        self.ps_transport.close()
        self.ps_control.close()
