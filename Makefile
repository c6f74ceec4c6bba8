# `make check` runs everything CI runs (lint, format, types, tests) in the local .venv.
PY ?= .venv/bin/python

.PHONY: check lint types imports test fmt bench venv openclaw-tools fuzz

venv:
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -e '.[dev]'

check: lint types imports test

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

types:
	$(PY) -m mypy

imports:
	.venv/bin/lint-imports

test:
	$(PY) -m pytest -q -n auto --dist loadgroup

fmt:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# The long profile of the hostile-input campaign (docs/reliability.md): every fuzzer with
# FUZZ_EXAMPLES cases, on PostgreSQL too when LOSSLESS_TEST_POSTGRES_URL is set.
FUZZ_EXAMPLES ?= 2000
fuzz:
	$(PY) tests/fuzz_campaign.py --examples $(FUZZ_EXAMPLES)

bench:
	cd benchmarks && ../$(PY) ingest.py && ../$(PY) import_memory.py

# The OpenClaw plugin's tool declarations, made from the recall tools' one declaration
# (tests/test_tools.py fails when they differ).
openclaw-tools:
	$(PY) -c 'import json; from lossless.toolbox import SESSION_TOOLS, tool_schemas; print(json.dumps(tool_schemas(SESSION_TOOLS, pinned=True), indent=2))' > hosts/openclaw/tools.json
