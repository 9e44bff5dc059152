# ESA: build, test and run.  `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
POOL ?= 1024
FORMAT ?= philly
P4C ?= p4c-bm2-ss
BUILD := build
P4_MAIN := p4src/esa.p4
P4_SRCS := $(wildcard p4src/*.p4 p4src/include/*.p4)

.PHONY: help setup build gen p4info test lint run cli stop sim sim-check sim-full sim-tier sim-trace bench soak clean

help:
	@echo "make setup   - install Debian packages, the virtualenv and Python deps; check the P4 toolchain"
	@echo "make build   - compile p4src/ into build/esa.json and build/esa.p4info.txtpb (POOL=$(POOL))"
	@echo "make gen     - regenerate p4src/include/{wire,codes,jobrow}.p4 from esa/wire.py, esa/spec.py and esa/jobrow.py"
	@echo "make p4info  - regenerate p4src/esa.p4info.txtpb with p4c (after a change to p4src/)"
	@echo "make test    - run the test suite (BMv2 tests skip, naming what is missing)"
	@echo "make lint    - ruff and mypy"
	@echo "make run     - a multi-job run on Mininet under each scheme, with JCT tables (RUN_ARGS=...)"
	@echo "make cli     - the same network, switch and controller at a mininet> prompt, no jobs started"
	@echo "make stop    - end a run left behind (its processes, work directory and PID file)"
	@echo "make sim     - the cluster-scale simulator: one point per regime, 3 seeds, and the pool and PS-shard curves"
	@echo "make sim-full - the simulator's full grid and sensitivity runs (tens of minutes)"
	@echo "               both on a local Dask cluster; a rerun resumes a stopped one (python -m sim --help: --fresh, --scheduler)"
	@echo "make sim-check - make sim's goal lines on reduced points in the fluid and the packet model, side by side (tens of minutes)"
	@echo "make sim-tier - the same jobs on one switch and on racks under a spine, two-tier aggregation (minutes)"
	@echo "make sim-trace TRACE=FILE FORMAT=philly|helios|pai - replay a public cluster trace under every scheme (TRACE_ARGS=...)"
	@echo "make bench   - the data-plane and host packet-rate benchmarks, and the packet model's"
	@echo "make soak    - jobs on the reference switch under a seeded schedule of kills and esa-ctl commands, 10 minutes (SOAK_ARGS=\"--minutes M --seed S --jobs N\")"
	@echo "make clean   - make stop, then remove build/ and results/ (compiled programs, logs, pcaps)"

setup:
	@bash scripts/setup.sh

$(PY):
	@bash scripts/setup.sh

gen: $(PY)
	$(PY) -m esa.codegen

build: $(BUILD)/esa.json

$(BUILD)/esa.json: $(P4_SRCS) | $(PY)
	@$(PY) -m esa.codegen --check
	@command -v $(P4C) >/dev/null || { echo "error: $(P4C) not found on PATH: install p4c (see README.md, Prerequisites)" >&2; exit 1; }
	@mkdir -p $(BUILD)
	$(P4C) --arch v1model --std p4-16 -DPOOL_SIZE=$(POOL) \
	    --p4runtime-files $(BUILD)/esa.p4info.txtpb -o $(BUILD)/esa.json $(P4_MAIN)

# The committed P4Info lets the controller and the reference switch run where
# p4c is missing; tests/test_refswitch.py fails when it is out of date.
# Always the default pool: the P4Info's register sizes are part of the file.
p4info: $(P4_SRCS) | $(PY)
	@$(PY) -m esa.codegen --check
	@mkdir -p $(BUILD)/p4info
	$(P4C) --arch v1model --std p4-16 \
	    --p4runtime-files p4src/esa.p4info.txtpb -o $(BUILD)/p4info/esa.json $(P4_MAIN)

test: $(PY)
	$(PY) -m pytest -ra

lint: $(PY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy esa controller hosts refswitch runner sim tests bench testbed examples

run: $(PY)
	$(PY) -m runner $(RUN_ARGS)

cli: $(PY)
	$(PY) -m runner --cli $(RUN_ARGS)

# Only what a run's PID file names (runner/lock.py); stdlib only, so no
# virtualenv is needed to tidy up.
stop:
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m runner.stop $(RUN_ARGS)

sim: $(PY)
	$(PY) -m sim

sim-check: $(PY)
	$(PY) -m sim.check

sim-full: $(PY)
	$(PY) -m sim --full --out results/sim-full

sim-tier: $(PY)
	$(PY) -m sim.tier_report

sim-trace: $(PY)
	@$(if $(TRACE),,echo "error: make sim-trace needs TRACE=FILE (and FORMAT=philly|helios|pai)" >&2; exit 2)
	$(PY) -m sim.traces replay --format $(FORMAT) --trace $(TRACE) $(TRACE_ARGS)

bench: $(PY) build
	$(PY) -m bench.dataplane_rate
	$(PY) -m bench.host_rate
	$(PY) -m bench.packet_rate

soak: $(PY)
	$(PY) -m bench.soak $(SOAK_ARGS)

clean: stop
	rm -rf $(BUILD) results
