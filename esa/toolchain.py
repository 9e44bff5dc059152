"""The P4 toolchain as the project calls it: one way to compile, one way to
say what is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def missing_binaries(*binaries: str) -> str | None:
    """Why something needing these programs can't run here, or None."""
    for b in binaries:
        if shutil.which(b) is None:
            return f"'{b}' not found on PATH (see README.md, Prerequisites)"
    return None


def compile_p4(source: Path, out_dir: Path, pool: int | None = None) -> tuple[Path, Path]:
    """Compile a v1model program with p4c-bm2-ss; returns (BMv2 JSON, P4Info)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = source.stem if pool is None else f"{source.stem}-pool{pool}"
    json_path = out_dir / f"{stem}.json"
    p4info = out_dir / f"{stem}.p4info.txtpb"
    cmd = ["p4c-bm2-ss", "--arch", "v1model", "--std", "p4-16"]
    if pool is not None:
        cmd.append(f"-DPOOL_SIZE={pool}")
    cmd += ["--p4runtime-files", str(p4info), "-o", str(json_path), str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"p4c-bm2-ss failed:\n{res.stderr}")
    return json_path, p4info
