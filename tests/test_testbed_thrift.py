"""The long-lived runtime CLI behind register reads, against a stand-in CLI
that speaks the same prompt protocol."""

from __future__ import annotations

import sys
import textwrap

from runner.devices.thrift import RegisterReader
from tests.wait import LIMIT_S

FAKE_CLI = textwrap.dedent(
    """
    import sys
    print("Obtaining JSON from switch...\\nDone")
    served = 0
    while True:
        line = input("RuntimeCmd: ")
        served += 1
        name = line.split()[1]
        if name == "quit":
            sys.exit(0)
        print(f"{name}= {served}, 0, 7")
    """
)


def test_reads_through_one_process_and_restarts_after_it_dies() -> None:
    reader = RegisterReader([sys.executable, "-c", FAKE_CLI], timeout=LIMIT_S)
    try:
        assert reader.read("a", "b") == {"a": [1, 0, 7], "b": [2, 0, 7]}
        first = reader.proc
        assert reader.read("a") == {"a": [3, 0, 7]}
        assert reader.proc is first, "one CLI process serves every read"
        assert reader.read("quit") is None
        assert reader.proc is None
        assert reader.read("a") == {"a": [1, 0, 7]}, "a new CLI after the old one died"
    finally:
        reader.close()
