# ESA: build, test and run.  `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
POOL ?= 1024
P4C ?= p4c-bm2-ss
BUILD := build
P4_MAIN := p4src/esa.p4
P4_SRCS := $(wildcard p4src/*.p4 p4src/include/*.p4)

.PHONY: help setup build gen test lint run sim bench clean

help:
	@echo "make setup   - install Debian packages, the virtualenv and Python deps; check the P4 toolchain"
	@echo "make build   - compile p4src/ into build/esa.json and build/esa.p4info.txtpb (POOL=$(POOL))"
	@echo "make gen     - regenerate p4src/include/{wire,codes}.p4 from esa/wire.py and esa/spec.py"
	@echo "make test    - run the test suite (BMv2 tests skip, naming what is missing)"
	@echo "make lint    - ruff and mypy"
	@echo "make run     - a multi-job run on Mininet under each policy, with JCT tables"
	@echo "make sim     - the cluster-scale simulator's default sweep"
	@echo "make bench   - the data-plane and host packet-rate benchmarks"

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

test: $(PY)
	$(PY) -m pytest -ra

lint: $(PY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy esa controller hosts sim tests bench
	cd mininet && ../$(VENV)/bin/mypy --config-file ../pyproject.toml *.py

run: $(PY)
	$(PY) mininet/run.py $(RUN_ARGS)

sim: $(PY)
	$(PY) -m sim

bench: $(PY) build
	$(PY) -m bench.dataplane_rate
	$(PY) -m bench.host_rate

clean:
	rm -rf $(BUILD) results
