#!/usr/bin/env bash
# Regenerate every figure of issue 6 (and figures/results.json) from the committed checkpoints/.
# No training: the small models in checkpoints/ are evaluated and probed afresh (CPU, a few minutes).
# figures/precision.png is drawn by `python -m constructions.addition.certify precision` when that module exists.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
exec "$PY" -m lengthgen.plot all --force "$@"
