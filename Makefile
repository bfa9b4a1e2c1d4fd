# `make demo` runs the main job on the bundled defaults; `make test` runs the test suite.
# Both create .venv and install fbnas into it on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
FBNAS := $(VENV)/bin/fbnas
DATA ?= ../shared/data/cifar10-subset
LUT ?= lookup_tables/fbnet_cifar_ort.json

.PHONY: install test test-fast demo profile docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# a dropped connection mid-download (torch is gigabytes) fails pip outright; try again
	@for i in 1 2 3; do \
	  $(PY) -m pip install -q --disable-pip-version-check --timeout 60 --retries 10 -e '.[dev]' \
	    && break; \
	  if [ $$i = 3 ]; then echo "pip install failed 3 times; check the network and rerun make" >&2; exit 1; fi; \
	  echo "pip install failed (try $$i of 3); trying again in 30 s" >&2; sleep 30; \
	done
	touch $@

install: $(VENV)/.installed

# Two pytest workers (pytest-xdist; TEST_WORKERS=0 runs in one process): most tests run
# torch on one thread or wait on a subprocess, so two at a time nearly halve the wall time
# on 2 cores. worksteal hands a free worker the queued tests of a busy one, so the few
# minute-long end-to-end tests do not pile up at the end of one worker's share.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test: install
	$(PYTEST)

# The unit tests only (1.5 minutes on 2 cores, 2.3 in one worker): no data folder, subprocesses or whole runs (-m "not slow").
test-fast: install
	$(PYTEST) -m "not slow"

# The main job: reuse (or measure) the fbnet_cifar table, search on the CIFAR-10 subset with
# the bundled budget recipe cut to a few minutes (configs/demo.yaml, on top of
# fbnas/configs/budget.yaml), sample the argmax architecture, then time it against the
# table's prediction.
demo: install
	@test -f $(LUT) || $(FBNAS) profile --space fbnet_cifar --out $(LUT) --check 50
	$(FBNAS) train --config configs/demo.yaml --lut $(LUT) --data-dir $(DATA) --out runs/demo --force
	$(FBNAS) sample runs/demo --hard --name demo --force
	$(FBNAS) latency runs/demo/arch.json --name demo --lut $(LUT)

# Measure a table on this machine: make profile LUT=lookup_tables/mine.json
profile: install
	$(FBNAS) profile --space fbnet_cifar --out $(LUT) --threads 1 --check 50

# docs/config.md, the config reference, from the keys declared in fbnas/config.py
docs: install
	$(PY) -m fbnas.config docs/config.md

clean:
	rm -rf $(VENV) runs .pytest_cache
