"""A stand-in for the switch on real UDP sockets: one thread runs
``esa.model.SwitchModel`` and forwards what it outputs.

For loopback tests and demos without BMv2: workers send to this switch's
address instead of the PS's, and it unicasts or multicasts by the model's
``Out`` (PS: the job's PS; ALL: workers and PS; WORKERS: workers).
"""

from __future__ import annotations

import random
import threading
import time

from esa import model, wire
from hosts import codec
from hosts.transport import Addr, UdpTransport


class LoopSwitch:
    def __init__(
        self,
        switch: model.SwitchModel,
        ps: dict[int, Addr],
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
                pkt = codec.to_model(memoryview(buf)[:n])
            except codec.Malformed:
                continue
            cfg = self.switch.jobs.get(pkt.job)
            in_port = 0 if cfg is None else cfg.ps_port + (src != self.ps.get(pkt.job))
            now_us = int((time.monotonic() - t0) * 1e6)
            for out in self.switch.process(pkt, now_us, in_port=in_port).outputs:
                self._forward(out)

    def _forward(self, out: model.Output) -> None:
        p = out.packet
        payload = codec.from_model(p)
        dsts = [] if out.to is model.Out.PS else list(self.workers.get(p.job, []))
        if out.to is not model.Out.WORKERS and p.job in self.ps:
            dsts.append(self.ps[p.job])
        for d in dsts:
            if self.rng.random() < self.loss:
                self.lost += 1
                continue
            self.forwarded += 1
            self.transport.send(payload, d)
