#!/usr/bin/env bash
# Regenerate every figure in figures/ (and figures/results.json) from the committed checkpoints/.
# No training: the small models in checkpoints/ are evaluated and probed afresh (CPU, a few minutes).
# Reruns on one machine and torch build give the same bytes (figures and results.json; measured with 1 and
# 2 torch threads). Another CPU's float32 kernels sum in another order: a few losses in results.json can move
# by 1e-6 (their 6th decimal); exact match and token accuracy stay (bench/bench_results_reproducible.py).
#  1. Theorem 5.1's model is exported as an ordinary checkpoint (python -m constructions.addition export);
#  2. lengthgen.plot draws the attention and length-generalization figures (1-5-digit models to 15 digits, 1-10-digit
#     models to 100 digits, the latter with a construction exported for 100) from checkpoints only;
#  3. figures/precision.png is redrawn by the certificate's own command from its cached map;
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m constructions.addition export "$work/construction" --digits 15
"$PY" -m constructions.addition export "$work/construction_100" --digits 100
"$PY" -m lengthgen.plot all --construction "$work/construction" --long-construction "$work/construction_100" \
    --force --threads 1 "$@"
"$PY" -m constructions.addition.certify precision --figure figures/precision.png --force
#  4. the heads of the compiled Turing-Program simulator (RASP -> weights) on a short addition trace;
"$PY" -m rasp.turing.plot --input 905+97 --out figures/turing_attention.png
#  5. the TransformerLens patching example (only where the interp extra is installed).
if "$PY" -c "import transformer_lens" 2>/dev/null; then
    "$PY" examples/patching.py
else
    echo "skipping figures/patching.png: TransformerLens is not installed (pip install -e '.[interp]')" >&2
fi
#  6. the heads of the N×2 multiplication construction.
"$PY" -m constructions.multiplication.figure --force
#  7. the N×2 construction (exported as a checkpoint) beside the committed 2-layer trained model, every layer
#     and head on one 5-digit example (docs/training.md, "N×2 multiplication").
"$PY" -m constructions.multiplication export "$work/multiplication" --digits 15
"$PY" -m lengthgen.plot attention --construction "$work/multiplication" \
    --checkpoint checkpoints/multiplication_nx2_coupled_2l4h --digits 5 --samples 1 \
    --out figures/attention_multiplication_trained.png --force --no-progress --threads 1
#  8. the model trained on 1-30 digits (one GPU, docs/training.md) beside the construction on 40-digit additions.
"$PY" -m lengthgen.plot attention --checkpoint checkpoints/addition_coupled_1l2h_packed_200 --digits 40 --samples 100 \
    --out figures/attention_addition_200.png --force --no-progress --threads 1
#  9. the model proven exact on every 10-digit addition (trained on 1-10 digits, docs/training.md, "Sharp attention
#     for proofs") beside the construction on 40-digit additions.
"$PY" -m lengthgen.plot attention --checkpoint checkpoints/addition_coupled_1l2h_packed_entropy_001_late_seed2 \
    --digits 40 --samples 100 --out figures/attention_addition_entropy_seed2.png --force --no-progress --threads 1
# 10. the model trained on 1-10 digits with up to six problems per packed row, at least 99% exact at every length up
#     to 100 (docs/training.md, "Six problems per packed row"), beside the construction on 40-digit additions.
"$PY" -m lengthgen.plot attention --checkpoint checkpoints/addition_coupled_1l2h_pack6_100 \
    --digits 40 --samples 100 --out figures/attention_addition_pack6.png --force --no-progress --threads 1
