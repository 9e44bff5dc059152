"""Training through the switch reaches the accuracy of a float all-reduce."""

from __future__ import annotations

import pytest

from esa import model, wire
from esa.job import Workers
from esa.spec import Policy
from hosts.programs import training
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from testbed import simnet

WORKERS = 3
STEPS = 150
TOLERANCE = 0.02
"""Largest accepted gap in test accuracy to the float all-reduce."""


def train_through_switch(policy: Policy, loss: float) -> float:
    data = training.make_dataset()
    sw = model.SwitchModel(pool_size=8, policy=policy, stale_us=2000)
    net = simnet.SimNet(sw, loss=loss, seed=3)
    ps = ParameterServer(
        net.transport("ps"), ("10.0.0.254", wire.UDP_PORT), {1: Workers.of(WORKERS)}, stall=0.004
    )
    net.add_agent(ps)
    names = [f"w{i}" for i in range(WORKERS)]
    transports = [net.transport(n) for n in names]
    net.route(1, ("ps",), names)
    sw.add_job(
        1,
        model.JobConfig(
            WORKERS, (1 << WORKERS) - 1, priority=1, ps_ports=(net.port("ps"),), part_size=8
        ),
    )
    drivers = []
    for i in range(WORKERS):
        x, y = data.shard(i, WORKERS)
        trainer = training.Trainer(training.new_model(data), x, y, WORKERS)
        worker = Worker(
            1, i, WORKERS, (net.hosts["ps"].addr,), transports[i],
            bound=training.GRAD_BOUND, window=16, rto=0.001,
        )  # fmt: skip
        drivers.append(training.TrainDriver(trainer, worker, STEPS))
        net.add_agent(drivers[-1])
    net.run(lambda: all(d.finished for d in drivers), max_time=600.0)
    accs = {d.trainer.model.accuracy(data.x_test, data.y_test) for d in drivers}
    assert len(accs) == 1, "every worker holds the same model"
    return accs.pop()


@pytest.mark.parametrize(("policy", "loss"), [(Policy.ESA, 0.05), (Policy.ATP, 0.0)])
def test_switch_training_matches_float_allreduce(policy: Policy, loss: float) -> None:
    reference = training.train_with_float_allreduce(training.make_dataset(), WORKERS, STEPS)
    assert reference > 0.6, "the task is learnable"
    acc = train_through_switch(policy, loss)
    assert abs(acc - reference) <= TOLERANCE
