# make test: create .venv if missing, install vitrio with its test extras, run the whole suite.
# make demo: run the main job on built-in example data.
# make docs: build the documentation site into site/, strictly (tests/docs/test_site.py builds it too).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo docs lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch is pinned exactly: this version is a CPU build that needs no download of CUDA libraries.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,cryovit,cli]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/vitrio demo --out demo-output

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/vitrio bench

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

clean:
	rm -rf $(VENV) build src/*.egg-info demo-output site
