# make test: create .venv if missing, install vitrio with its test extras, run the whole suite.
# make demo: run the main job on built-in example data.
# make docs: build the documentation site into site/, strictly (tests/docs/test_site.py builds it too).
# make test-native-sanitized: tests/native against the C extension built with AddressSanitizer and
#   UndefinedBehaviorSanitizer (GCC's runtimes), in a copy of the package under build/sanitized.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-native-sanitized demo docs lint bench clean

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

SANITIZED := build/sanitized
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
PY_CONFIG = $(BIN)/python -c 'import sysconfig, sys; print(sysconfig.get_config_var(sys.argv[1]))'
SANITIZED_PYTHON = LD_PRELOAD="$$($(CC) -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0:handle_sigbus=0 UBSAN_OPTIONS=print_stacktrace=1 \
	PYTHONPATH=$(SANITIZED) $(BIN)/python

test-native-sanitized: $(STAMP)
	rm -rf $(SANITIZED) && mkdir -p $(SANITIZED)
	cp -r src/vitrio $(SANITIZED)/vitrio
	rm -f $(SANITIZED)/vitrio/_native*.so
	$(CC) -g -O1 $(SANITIZE) -shared -fPIC -I"$$($(PY_CONFIG) INCLUDEPY)" src/vitrio/_native.c \
		-o $(SANITIZED)/vitrio/_native$$($(PY_CONFIG) EXT_SUFFIX)
	$(SANITIZED_PYTHON) -c 'import vitrio._native as n; assert "$(SANITIZED)" in n.__file__, n.__file__'
	$(SANITIZED_PYTHON) -m pytest -q -p no:cacheprovider tests/native

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
