# The two commands a newcomer needs: `make run` and `make test`; `make check` before a commit.
# The newest CPython found that can make a venv, of 3.13, 3.12 and python3 (3.11 or newer):
# from 3.12 on, agents share the objects of the template they fork from, which halves their
# memory (agentproc/immortal_heap.py). pyenv's installed versions count, enabled or not.
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON ?= $(firstword $(foreach p,python3.13 python3.12 \
	$(sort $(wildcard $(PYENV_ROOT)/versions/3.13*/bin/python3)) \
	$(sort $(wildcard $(PYENV_ROOT)/versions/3.12*/bin/python3)) python3,\
	$(if $(shell $(p) -c 'import ensurepip, venv' 2>/dev/null && echo ok),$(p))))
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install bytecode run test check lint bench soak docs clean

install: $(STAMP)

# The project's own modules compiled to bytecode, as pip compiles an installed package: an
# editable install leaves that to the interpreter, which writes none where
# PYTHONDONTWRITEBYTECODE is set (many containers set it), and then every daemon, CLI command
# and tool subprocess compiles each module it imports from source again (~0.1 s of each
# start; `goondan run --input` took 0.43 s instead of 0.31). Only what changed is compiled again.
PACKAGES := ipc goondan agentproc orchestrator base_tools tests bench
bytecode: install
	$(BIN)/python -m compileall -q $(PACKAGES) > /dev/null

# Re-install only when the project definition changes; editable, so code edits need nothing.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev,otel,ray,bench]'
	touch $(STAMP)

run: bytecode
	$(BIN)/goondan run configs/quickstart --log-level warning --transcript \
		--input "What is 19 plus 23? Ask the researcher for a fun fact too."

# Four workers whatever the cores: most tests wait on a daemon (start, a socket, a file), so
# four workers overlap those waits even on 2 cores.
test: bytecode
	$(BIN)/python -m pytest -q -n 4 --dist worksteal -m 'not serial'
	$(BIN)/python -m pytest -q -m serial

bench: bytecode
	$(BIN)/python -m bench

# Not part of `make test`: N minutes of real delegations under attack, then a count (as root:
# the state root is a small tmpfs the soak mounts and fills). Exit 1 if anything was lost.
MINUTES ?= 10
soak: bytecode
	$(BIN)/python -m bench.soak --minutes $(MINUTES) --report soak.json

# Lint, format and types, with the versions pinned in the `dev` extra (what CI and pre-commit
# run). mypy reads its files and --strict from pyproject.toml.
CHECKED := $(PACKAGES)
check: install
	$(BIN)/ruff check $(CHECKED)
	$(BIN)/ruff format --check $(CHECKED)
	$(BIN)/mypy

lint: check

# The user docs as a site in site/; --strict turns a broken link or nav entry into a failure.
# In a venv of its own: mkdocs-material's dependencies (colorama, which structlog then imports)
# would change what the tests' venv runs, and a test of the template's memory with it.
DOCS_VENV := .venv-docs
docs:
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) $(DOCS_VENV) build *.egg-info
