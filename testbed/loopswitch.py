"""A stand-in for the switch on real UDP sockets: one thread runs
``esa.model.SwitchModel`` and forwards what it outputs.

For loopback tests and demos without BMv2: workers send to this switch's
address instead of their PS hosts', and it unicasts or multicasts by the
model's ``Out`` (PS: the PS of the chunk's shard; ALL: the workers and that
PS; WORKERS: the workers).  The model checks what it takes from a PS by
port: a job's PS hosts are on its ``JobConfig.ps_ports``, in shard order,
the workers on a port none of them has.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import TypeVar

from esa import model, wire
from esa.job import ps_shard
from hosts.net import payload
from hosts.net.transport import Addr, UdpTransport

H = TypeVar("H")


def destinations(out: model.Output, workers: Sequence[H], pses: Sequence[H]) -> list[H]:
    """Where the switch sends ``out``, given its job's workers and PS hosts
    in shard order: a sum to all goes to the workers and the PS of its
    chunk's shard, as a unicast to the PS does."""
    ps = [pses[ps_shard(out.packet.seq, len(pses))]] if pses else []
    if out.to is model.Out.PS:
        return ps
    return [*workers, *ps] if out.to is model.Out.ALL else list(workers)


class LoopSwitch:
    """``ps`` maps a job to its PS addresses in shard order, ``workers`` to
    its workers' addresses."""

    def __init__(
        self,
        switch: model.SwitchModel,
        ps: dict[int, tuple[Addr, ...]],
        workers: dict[int, list[Addr]],
        bind: Addr = ("127.0.0.1", 0),
        loss: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.switch, self.ps, self.workers = switch, ps, workers
        self.transport = UdpTransport(bind)
        self.loss, self.rng = loss, random.Random(seed)
        self.forwarded = 0
        self.lost = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopswitch", daemon=True)

    @property
    def addr(self) -> Addr:
        return self.transport.addr

    def start(self) -> LoopSwitch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.transport.close()

    def _run(self) -> None:
        buf = bytearray(wire.PAYLOAD_BYTES + 1)
        t0 = time.monotonic()
        while not self._stop.is_set():
            got = self.transport.recv_into(buf)
            if got is None:
                self.transport.wait(0.01)
                continue
            n, src = got
            try:
                pkt = payload.to_model(memoryview(buf)[:n])
            except payload.Malformed:
                continue
            port = self._port_of(pkt.job, src)
            now_us = int((time.monotonic() - t0) * 1e6)
            for out in self.switch.process(pkt, now_us, in_port=port).outputs:
                self._forward(out)

    def _port_of(self, job: int, src: Addr) -> int:
        cfg = self.switch.jobs.get(job)
        if cfg is None:
            return 0
        pses = self.ps.get(job, ())
        return cfg.ps_ports[pses.index(src)] if src in pses else max(cfg.ps_ports) + 1

    def _forward(self, out: model.Output) -> None:
        frame = payload.from_model(out.packet)
        job = out.packet.job
        for d in destinations(out, self.workers.get(job, []), self.ps.get(job, ())):
            if self.rng.random() < self.loss:
                self.lost += 1
                continue
            self.forwarded += 1
            self.transport.send(frame, d)
