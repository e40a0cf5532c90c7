#!/usr/bin/env bash
# Regenerate every figure in figures/ (and figures/results.json) from the committed checkpoints/.
# No training: the small models in checkpoints/ are evaluated and probed afresh (CPU, a few minutes).
#  1. Theorem 5.1's model is exported as an ordinary checkpoint (python -m constructions.addition export);
#  2. lengthgen.plot draws the attention and length-generalization figures from checkpoints only;
#  3. figures/precision.png is redrawn by the certificate's own command from figures/precision.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m constructions.addition export "$work/construction" --digits 15
"$PY" -m lengthgen.plot all --construction "$work/construction" --force "$@"
"$PY" -m constructions.addition.certify precision --figure figures/precision.png
