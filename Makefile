# gpuhost — the two commands a new user types: `make demo` and `make test`.
# Both do their own set-up: venv, system packages (as root), the private dockerd, the base images.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PYTHON ?= python3
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/bin:$(PATH)
# Every docker command of the harness talks to its own daemon, never the machine's.
# HARNESS_RUN/HARNESS_ROOT pick another private daemon (e.g. a second checkout's CI run beside yours).
export HARNESS_RUN ?= /run/gpuhost-harness
export HARNESS_ROOT ?= /var/lib/gpuhost-harness
export DOCKER_HOST := unix://$(HARNESS_RUN)/docker.sock
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0

# Scenarios `make test` runs, in order (SCENARIOS=... to pick).
SCENARIOS ?= docker containerd toolkit drift_schedule driver driver_debian driver_cuda hgx mig first_use drift vllm

.PHONY: help venv sysdeps harness images lint unit molecule test demo bench clean collection sanity sanity-setup
help:
	@echo "make demo   provision a simulated GPU host with site.yml and print its layer report"
	@echo "make test   everything CI runs: lint, unit tests, molecule scenarios ($(SCENARIOS))"
	@echo "make unit | lint | molecule SCENARIOS=... | bench | clean"
	@echo "make collection   build the gpuhost.gpu collection artifact (.cache/collection/)"
	@echo "make sanity       ansible-test sanity on the built collection (sanity-setup: its environments, from PyPI)"

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	@touch $@

sysdeps:
	@tests/harness/sysdeps.sh

harness: sysdeps venv
	@tests/harness/dockerd.sh start
	@tests/harness/images.sh
	@mkdir -p .cache/apt/bookworm/partial .cache/apt/trixie/partial
	@tests/harness/testimage.sh
	@tests/harness/simrepo.sh start
	@tests/harness/promtool.sh >/dev/null

lint: venv
	$(VENV)/bin/python -m pytest -q tests/lint

unit: venv
	$(VENV)/bin/python -m pytest -q tests/unit

# The gpuhost.gpu collection, generated from this tree (tests/harness/collection.py; README "Use it from your
# own playbooks"): prints the artifact's path.
collection: venv
	@$(VENV)/bin/python tests/harness/collection.py build

# ansible-test sanity on the built collection (make lint runs it too: tests/lint/test_collection.py).
# sanity-setup builds ansible-test's per-test environments ahead, from PyPI (pins: ansible-test's own, and
# tests/sanity/requirements.txt for the pip they bootstrap from).
sanity: venv
	$(VENV)/bin/python tests/harness/collection.py sanity

sanity-setup: venv
	$(VENV)/bin/python tests/harness/collection.py sanity --prime-venvs

molecule: harness
	GPUHOST_SCENARIOS="$(SCENARIOS)" $(VENV)/bin/python -m pytest -v --durations=15 tests/molecule

# One pytest run, so the output ends with one summary line that counts everything. Two workers, a test file
# each at a time (pytest-xdist, --dist loadfile): the molecule scenarios are one file, so they still run one
# after another in one worker, from the start (listed first), while the other worker takes the unit and lint
# tests. A scenario leaves about one of the two cores idle (measured: 47 % idle during the MIG serving scenario).
test: harness
	GPUHOST_SCENARIOS="$(SCENARIOS)" $(VENV)/bin/python -m pytest -v -p no:cacheprovider --durations=15 \
	  -n 2 --dist loadfile tests/molecule tests/unit tests/lint

demo: harness
	@tests/harness/demo.sh

bench: venv
	@for b in bench/bench_*.py; do echo "== $$b"; $(VENV)/bin/python $$b || true; done

clean:
	-@tests/harness/cleanup.sh
	-@tests/harness/simrepo.sh stop
	-@tests/harness/dockerd.sh stop
