# Quick start:  make demo   (set up, then add two 100000-digit numbers with the Theorem 5.1 transformer)
#               make test   (set up, then run the proof checks)
# Also: make bench (long-operand benchmarks), make figures (regenerate figures/ from checkpoints/),
#       make mutate PART=interval (mutation testing of one part, niced; PART=all runs every part;
#       the parts and their tests are listed in bench/mutate.py, the reports go to bench/results/mutation/)
# The set-up installs the CPU torch wheel first (pinned: an unpinned torch pulls a multi-GB CUDA build),
# then the project with the dev and interp (TransformerLens) extras; `make test EXTRAS=dev` skips TransformerLens.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,interp
BIN := $(VENV)/bin

.PHONY: setup demo test bench figures mutate
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]' "$(TORCH_SPEC)"
	touch $@

demo: setup
	$(BIN)/python -m constructions.addition --digits 100000

test: setup
	$(BIN)/python -m pytest -n 2

bench: setup
	$(BIN)/python bench/bench_addition.py

figures: setup
	PYTHON=$(BIN)/python figures/regenerate.sh

$(VENV)/.mutate-installed: $(VENV)/.installed
	$(BIN)/pip install -q --disable-pip-version-check -e '.[$(EXTRAS),mutate]' "$(TORCH_SPEC)"
	touch $@

ifneq ($(filter mutate,$(MAKECMDGOALS)),)
ifndef PART
$(error usage: make mutate PART=<part> or PART=all; the parts are listed in bench/mutate.py)
endif
endif
mutate: $(VENV)/.mutate-installed
	nice -n 15 $(BIN)/python bench/mutate.py $(PART)
