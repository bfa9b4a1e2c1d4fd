# `make demo` runs the main job on the bundled defaults; `make test` runs the test suite.
# Both create .venv and install fbnas into it on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
FBNAS := $(VENV)/bin/fbnas
DATA ?= ../shared/data/cifar10-subset

.PHONY: install test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest -q

demo: install
	$(FBNAS) show-lut lookup_tables/fbnet_cifar.json --space fbnet_cifar

clean:
	rm -rf $(VENV) runs .pytest_cache
