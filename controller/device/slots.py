"""Who holds the slot pool: the ``slot_owner`` register of a switch.

A switch that serves register reads over P4Runtime (the reference switch,
``refswitch.main``) is read over the controller's session with it.  BMv2
serves none (PI issue 376: ``UNIMPLEMENTED``), so there this view runs
``simple_switch_CLI`` (given to ``serve`` as ``--thrift-cli``, e.g.
``ip netns exec sw simple_switch_CLI --thrift-port 9090``) with
``register_read EsaIngress.pool.slot_owner``, which prints the whole array.
"""

from __future__ import annotations

import re
import subprocess

from controller.device.p4rt import Unimplemented
from controller.device.session import SwitchSession
from controller.errors import FailedPrecondition, SwitchError
from esa.p4names import SLOT_OWNER

_ARRAY = re.compile(re.escape(SLOT_OWNER) + r"=\s*([0-9,\s]*)")
CLI_TIMEOUT_S = 30.0


def served_owners(session: SwitchSession) -> list[int] | None:
    """``slot_owner`` read over P4Runtime; None where the switch serves no
    register reads."""
    try:
        return session.read_registers(SLOT_OWNER)[SLOT_OWNER]
    except Unimplemented:
        return None


def no_owners(device: str, alone: bool) -> FailedPrecondition:
    """The refusal for a switch that serves no register reads and has no
    Thrift CLI; ``alone``: the only switch of the fabric."""
    why = "serves no register reads over P4Runtime (BMv2 serves none)"
    if alone:
        return FailedPrecondition(
            f"the switch {why}: the slots view needs `serve --thrift-cli CMD`"
        )
    return FailedPrecondition(
        f"switch {device} {why}: the slots view of {device} needs `serve --thrift-cli {device}=CMD`"
    )


def parse_owners(output: str) -> list[int]:
    """The ``slot_owner`` values in a ``register_read`` of the whole array."""
    m = _ARRAY.search(output)
    if m is None:
        raise SwitchError(f"unexpected simple_switch_CLI output: {output.strip()[:200]!r}")
    return [int(v) for v in m.group(1).replace(",", " ").split()]


def read_owners(cli: list[str]) -> list[int]:
    try:
        res = subprocess.run(
            cli,
            input=f"register_read {SLOT_OWNER}\n",
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SwitchError(f"cannot run {' '.join(cli)}: {e}") from None
    if res.returncode != 0:
        raise SwitchError(f"{' '.join(cli)} failed: {res.stderr.strip()[:200]}")
    return parse_owners(res.stdout)
