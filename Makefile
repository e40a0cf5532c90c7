# Quick start:  make demo   (set up, then add two 100000-digit numbers with the Theorem 5.1 transformer)
#               make test   (set up, then run the proof checks)
# Also: make bench (long-operand benchmarks), make figures (regenerate figures/ from checkpoints/),
#       make mutate PART=interval (mutation testing of one part, niced; PART=all runs every part;
#       the parts and their tests are listed in bench/mutate.py, the reports go to bench/results/mutation/)
# The set-up installs torch first, pinned, then the project with the dev and interp (TransformerLens 4)
# extras; `make test EXTRAS=dev` skips TransformerLens, `EXTRAS=dev,interp3` installs 3.9.0 instead. Which torch build comes depends on where pip looks:
# plain PyPI on Linux serves torch==2.13.0 as the CUDA build (several GB with its nvidia packages); a
# local wheel directory or index that holds 2.13.0+cpu gives the CPU build. For the CPU build from
# PyTorch's own CPU wheel index:  make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
# The set-up prints which build it installed.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS ?= dev,interp
BIN := $(VENV)/bin

.PHONY: setup demo test bench figures mutate
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH_SPEC)"
	$(BIN)/pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]' "$(TORCH_SPEC)"
	$(BIN)/python -c "import torch; print('set-up: torch', torch.__version__, '(CUDA build ' + torch.version.cuda + ')' if torch.version.cuda else '(CPU-only build)')"
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
