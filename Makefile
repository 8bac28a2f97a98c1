# One set of commands for people, CI and the benchmarks.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test install-browser install-llama install-node demo test test-unit lint typecheck schema docs serve inspector-screenshots

# the configured embedding model's files come from Maven Central once (hash-checked, cached in
# $HRT_CACHE_DIR/models); the tests load every prebuilt model
install:
	$(PIP) install -q -e .
	hrt models fetch

install-test: install-browser
	$(PIP) install -q -e '.[test]'
	hrt models fetch --all

# Debian's chromium for the inspector's browser tests (Playwright drives it; no `playwright install`)
install-browser:
	bash scripts/install-browser.sh

demo: install
	hrt demo

# llama-cpp-python compiles from source once; the wheel and the test GGUF are cached by version
install-llama:
	PYTHON=$(PYTHON) bash scripts/install-llama.sh

# the TypeScript client's tests (tests/integration/test_typescript_client.py) run `node --test`:
# Node 18+ from the system's packages when the machine lacks it
install-node:
	@node -e 'process.exit(Number(Number(process.versions.node.split(".")[0]) < 18))' 2>/dev/null || \
		(sudo -n true 2>/dev/null && SUDO=sudo; $$SUDO apt-get install -y -q nodejs npm)

test: install-test install-llama install-node
	$(PYTHON) -m pytest -q

test-unit: install-test
	$(PYTHON) -m pytest -q tests/unit tests/contract

lint:
	$(PYTHON) -m ruff check hrt tests
	$(PYTHON) -m mypy

schema:
	hrt export-schema --out hrt/schema
	$(PYTHON) clients/typescript/scripts/openapi.py > clients/typescript/openapi.json
	node clients/typescript/scripts/generate-types.mjs
	cd clients/typescript && npm ci --no-audit --no-fund --prefer-offline && npm run build

docs:
	$(PYTHON) -m hrt.config_docs docs/configuration.md

# docs/inspector.md and its screenshots (docs/img/inspector-*.png), from a real hrt serve in Chromium
inspector-screenshots: install-browser
	$(PYTHON) scripts/inspector_screenshots.py

serve: install
	hrt serve
