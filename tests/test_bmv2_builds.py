"""``bench.bmv2_builds``: what it takes as a build, and how it tells a build
that logs a packet trace from one that does not."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.bmv2_builds import build_arg, logs_packets


def prefix(tmp_path: Path, config: str | None) -> Path:
    """An installed build's prefix: ``bin/simple_switch_grpc`` and, unless
    None, ``include/bm/config.h`` holding ``config``."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "simple_switch_grpc").write_text("")
    if config is not None:
        (tmp_path / "include" / "bm").mkdir(parents=True)
        (tmp_path / "include" / "bm" / "config.h").write_text(config)
    return tmp_path / "bin"


@pytest.mark.parametrize(
    ("config", "logs"),
    [
        ("#ifndef BM_LOG_TRACE_ON\n#define BM_LOG_TRACE_ON /**/\n#endif\n", "yes"),
        ("/* #undef BM_LOG_TRACE_ON */\n", "no"),
    ],
)
def test_a_build_says_whether_it_logs_a_packet_trace(
    tmp_path: Path, config: str, logs: str
) -> None:
    assert logs_packets(prefix(tmp_path, config)) == logs


def test_a_build_without_its_headers_is_unknown(tmp_path: Path) -> None:
    bindir = prefix(tmp_path, None)
    assert logs_packets(bindir) == f"unknown (no {tmp_path / 'include' / 'bm' / 'config.h'})"


def test_a_build_is_a_name_and_the_directory_of_its_switch(tmp_path: Path) -> None:
    bindir = prefix(tmp_path, None)
    assert build_arg(f"perf={bindir}") == ("perf", bindir)
    for bad, why in (
        (str(bindir), "expected NAME=DIR"),
        (f"={bindir}", "expected NAME=DIR"),
        ("perf=", "expected NAME=DIR"),
        (f"perf={tmp_path}", f"no simple_switch_grpc in {tmp_path}"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            build_arg(bad)
