# `make demo` runs the main job on the bundled defaults; `make test` runs the test suite.
# Both create .venv and install fbnas into it on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
FBNAS := $(VENV)/bin/fbnas
DATA ?= ../shared/data/cifar10-subset
LUT ?= lookup_tables/fbnet_cifar_ort.json

.PHONY: install test test-fast demo profile clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest -q

# The unit tests only (about 56 s on 2 cores): no data folder, subprocesses or whole runs (-m "not slow").
test-fast: install
	$(PY) -m pytest -q -m "not slow"

# The main job: reuse (or measure) the fbnet_cifar table, search on the CIFAR-10 subset,
# sample the argmax architecture, then time it against the table's prediction.
demo: install
	@test -f $(LUT) || $(FBNAS) profile --space fbnet_cifar --out $(LUT) --check 50
	$(FBNAS) train --config configs/demo.yaml --lut $(LUT) --data-dir $(DATA) --out runs/demo --force
	$(FBNAS) sample runs/demo --hard --name demo --force
	$(FBNAS) latency runs/demo/arch.json --name demo --lut $(LUT)

# Measure a table on this machine: make profile LUT=lookup_tables/mine.json
profile: install
	$(FBNAS) profile --space fbnet_cifar --out $(LUT) --threads 1 --check 50

clean:
	rm -rf $(VENV) runs .pytest_cache
