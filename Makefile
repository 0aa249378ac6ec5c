# The two commands a newcomer types: `make run` and `make test`.
# Everything is installed into .venv by this file and pyproject.toml.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP_RUN := $(VENV)/.kilter-run
STAMP := $(VENV)/.kilter-installed
NATIVE := $(wildcard kilter/_native/*.pyx kilter/_native/*.pxd kilter/_native/*.h)

.PHONY: all run test e2e lint bench dashboard build image image-check plugin native-debug clean

all: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# `make run` installs what running needs: the build tools, then the project in editable mode, which compiles
# the Cython core once (its modules side by side) and generates the gRPC stubs from kilter/api/*.proto; again
# whenever a .pyx/.pxd/.h or .proto changes. Everything else (`make test`, lint, bench) adds the development
# extras to that install, without compiling again: the installed kilter satisfies `kilter[dev]`.
$(STAMP_RUN): $(PY) pyproject.toml setup.py $(NATIVE) kilter/api/placement.proto kilter/api/pool.proto
	$(PY) -m pip install --quiet "setuptools>=69" "Cython>=3.0.10,<4" "numpy>=2.0" wheel \
		"grpcio-tools>=1.85.1,<1.86" "mypy-protobuf>=5.0"
	$(PY) -m pip install --quiet --no-build-isolation -e .
	@touch $(STAMP_RUN)

$(STAMP): $(STAMP_RUN)
	$(PY) -m pip install --quiet 'kilter[dev]'
	@touch $(STAMP)

run: $(STAMP_RUN)
	$(VENV)/bin/kilter demo

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

# Checks against a real API server: a kind cluster made for the run (Docker and
# kind needed), or KILTER_E2E_KUBECONFIG. Skipped, saying why, where neither is.
e2e: $(STAMP)
	KILTER_E2E=1 $(PY) -m pytest -rs tests/e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check kilter tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench

# docs/operations-dashboard.png: the monitoring dashboard's panels, drawn from a real kilter serve's metrics while
# kilter demo's scheduler stand-in places the demo trace through it (about half a minute).
dashboard: $(STAMP)
	$(PY) -m bench.dashboard docs/operations-dashboard.png

build: $(STAMP)
	$(PY) -m build --no-isolation --outdir dist .

# The container image (Dockerfile), where a container engine is: docker, else podman. None runs on the
# development machines, so there this says so and stops; image-check tests what the image runs without one:
# the wheel of `make build`, installed alone, serving the demo (tests/packaging).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# The image's name: the manifests' by default; `make image IMG=<registry>/kilter:<version>` for your registry.
IMG ?= kilter:$(VERSION)
ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)

image:
	@if [ -z "$(ENGINE)" ]; then \
		echo "make image: no container engine (docker or podman) on this machine; the image is not built."; \
		echo "What it runs is tested without one: make build && make image-check"; exit 1; fi
	$(ENGINE) build --build-arg VERSION=$(VERSION) -t $(IMG) .

image-check: $(STAMP)
	KILTER_WHEEL="$$(ls -t dist/kilter-$(VERSION)-*.whl | head -n 1)" $(PY) -m pytest -q -rs tests/packaging

# The Cython core with bounds and wraparound checks on, run against its tests.
# Afterwards the release build is restored, whatever the tests said.
native-debug: $(STAMP)
	KILTER_NATIVE_DEBUG=1 $(PY) setup.py --quiet build_ext --inplace --force
	status=0; $(PY) -m pytest -q tests/native || status=$$?; \
	$(PY) setup.py --quiet build_ext --inplace --force; exit $$status

clean:
	rm -rf build dist *.egg-info kilter/_native/*.so kilter/_native/*.c kilter/api/placement_pb2* kilter/api/pool_pb2*

# The one-file kubectl plugin: dist/kubectl-kilter, the compiled core inside (PyInstaller, the `plugin` extra).
plugin: $(STAMP)
	$(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN \
		--distpath dist --workpath build/pyinstaller plugins/kubectl-kilter.spec
