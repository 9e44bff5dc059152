#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the virtualenv, Python deps, toolchain check.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
APT_PKGS=(mininet iproute2 ethtool tcpdump iputils-ping nftables)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: warning: missing Debian packages (install them as root): ${missing[*]}" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# .[torch] pins torch==2.13.0 for the DDP hook (README: getting its CPU-only build).
.venv/bin/python -m pip install -q -e '.[dev,torch]'

# Mininet's Python module comes from Debian's python3-mininet; expose it to the venv.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/mininet ] && [ ! -e "$site/mininet" ]; then
  ln -s /usr/lib/python3/dist-packages/mininet "$site/mininet"
fi

status=0
for bin in p4c-bm2-ss simple_switch_grpc simple_switch_CLI; do
  if ! command -v "$bin" >/dev/null; then
    status=1
    echo "setup: '$bin' is not on PATH." >&2
  fi
done
if command -v simple_switch_CLI >/dev/null && ! simple_switch_CLI --help >/dev/null 2>&1; then
  status=1
  echo "setup: 'simple_switch_CLI' is on PATH but does not run; the python3 it uses" \
       "(its '#!/usr/bin/env python3') needs the 'thrift' module: python3 -m pip install thrift" >&2
fi
if [ $status -ne 0 ]; then
  cat >&2 <<'TXT'
setup: the P4 toolchain is missing. Tests that need it will be skipped.
  Get p4c (p4c-bm2-ss) and BMv2 (simple_switch_grpc, built with PI and Thrift) by one of:
  - the P4 tutorials VM (github.com/p4lang/tutorials), which has both;
  - the p4lang packages for Ubuntu (p4lang-p4c, p4lang-bmv2);
  - a source build: PI v0.1.2, behavioral-model 1.15.5 (--with-pi --with-thrift),
    p4c v1.2.4.8 (BMv2 backend), installed under /usr/local.
TXT
fi
echo "setup: done. In each shell: source .venv/bin/activate (puts esa-ctl, esa-ps, esa-worker, esa-refswitch and torchrun on PATH)"
