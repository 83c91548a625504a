# Both entry points create .venv on first use, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Shopify's Toxiproxy server, built from source with Go into a project-local tools dir (git-ignored).
TOXIPROXY_VERSION := 2.12.0
TOXIPROXY_BIN := .tools/bin/toxiproxy-server

.PHONY: demo test lint typecheck check clean toxiproxy system-deps llama-server

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cliffwatch needs Python >= 3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# A toxiproxy-server on PATH is used as it is; otherwise .tools/bin/toxiproxy-server is built unless it is
# there at this version. Without Go this only warns: the demo still runs, without faults.
toxiproxy:
	@if command -v toxiproxy-server >/dev/null 2>&1; then \
		echo "toxiproxy: using $$(command -v toxiproxy-server)"; \
	elif $(TOXIPROXY_BIN) -version 2>/dev/null | grep -q ' $(TOXIPROXY_VERSION)$$'; then \
		:; \
	elif ! command -v go >/dev/null 2>&1; then \
		echo "WARNING: toxiproxy-server is not on PATH and Go is not installed, so it cannot be built." >&2; \
		echo "WARNING: scenarios run without faults and the Toxiproxy tests fail; install Go and run 'make toxiproxy'." >&2; \
	else \
		echo "toxiproxy: building toxiproxy-server $(TOXIPROXY_VERSION) into $(TOXIPROXY_BIN)"; \
		rm -rf .tools/build && \
		GOBIN="$(CURDIR)/.tools/build" go install \
			-ldflags "-X github.com/Shopify/toxiproxy/v2.Version=$(TOXIPROXY_VERSION)" \
			github.com/Shopify/toxiproxy/v2/cmd/server@v$(TOXIPROXY_VERSION) && \
		mkdir -p $(dir $(TOXIPROXY_BIN)) && \
		mv .tools/build/server $(TOXIPROXY_BIN) && \
		rm -rf .tools/build; \
	fi

demo: $(STAMP) toxiproxy
	$(BIN)/cliffwatch demo --reports-dir demo-out

# PostgreSQL, HAProxy and Chromium: the tests start them for real; installed with apt-get when missing.
system-deps:
	bash tests/install-system-deps.sh

# llama.cpp's llama-server for the real-engine tests (pytest -m llama_server), built from the sources the
# llama-cpp-python sdist on PyPI vendors, once per machine, into ~/.cache/cliffwatch/engines (about five
# minutes on two cores the first time; nothing after). Needs CMake and a C++ compiler.
llama-server: $(STAMP)
	PYTHON=$(BIN)/python bash tests/engines/build-llama-server.sh

# The suite in parallel (tests/run-suite.sh says how; docs/design.md why); TEST_WORKERS=1: in one process.
TEST_WORKERS ?= 4
test: $(STAMP) toxiproxy system-deps llama-server
	TEST_WORKERS=$(TEST_WORKERS) PYTHON=$(BIN)/python bash tests/run-suite.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests bench migrations
	$(BIN)/ruff format --check src tests bench migrations

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

check: lint typecheck

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-out
