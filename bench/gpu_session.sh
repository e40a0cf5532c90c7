#!/usr/bin/env bash
# The GPU runs behind bench/results/gpu/ (README, "GPU"), in two parts that run on one machine:
#
#   bash bench/gpu_session.sh timing      # alone on the GPU: long operands, attention vs SDPA, Turing program
#   bash bench/gpu_session.sh throughput  # test suite, precision map, certificate, paper-recipe training
#   bash bench/gpu_session.sh leftovers   # what the first session's time limits cut, in one call (see the function)
#   bash bench/gpu_session.sh remaining   # what is still unmeasured on a GPU, in one call (see the function)
#
# Results go to gpu_results/ (and are copied to $OUT when set). Every step has its own time limit,
# so one slow step cannot take the others' results with it.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD" MPLBACKEND=Agg
PY=${PY:-python3}
DEV=${DEV:-cuda}          # DEV=cpu and the small sizes below check the script on a machine without a GPU
ADD_DIGITS=${ADD_DIGITS:-100000 1000000}
GREEDY_DIGITS=${GREEDY_DIGITS:-10000 100000}
ATT_TOKENS=${ATT_TOKENS:-300015 3000015}
TM_TOKENS=${TM_TOKENS:-10000 100000}
PYTEST_SELECT=${PYTEST_SELECT:-}
R=gpu_results
mkdir -p "$R"
log() { echo "[$(date +%T)] $*"; }

setup() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
            && export PYTHONPATH="$PYTHONPATH:/tmp/site"
    fi
    # the package's entry points (the registered 'construction' checkpoint) need an install
    $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$R/pip.log" 2>&1 || log "pip -e failed (see pip.log)"
}

timing() {
    $PY bench/bench_gpu.py env --out "$R"; save timing
    log addition; timeout 170 $PY bench/bench_gpu.py addition --out "$R" --device $DEV --timeout 45 --greedy-timeout 75 \
        --digits $ADD_DIGITS --greedy-digits $GREEDY_DIGITS; save timing
    log attention; timeout 60 $PY bench/bench_gpu.py attention --out "$R" --device $DEV --repeats 2 --tokens $ATT_TOKENS
    save timing
    log turing; timeout 90 $PY bench/bench_gpu.py turing --out "$R" --device $DEV --greedy-seconds 25 --tokens $TM_TOKENS
    save timing
}

# what the first session's limits cut, in one call of under 10 minutes: the GPU tests, greedy
# decoding's paths side by side (growing cache, static cache, CUDA graph) and the teacher pass
# called twice, 10^5 digits greedy and 10^6 teacher through the CLI, the Turing program's traces,
# then the whole suite in the time that is left (names kept: -v)
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-570} ))
left() { local l=$(( DEADLINE - $(date +%s) )); (( l < $1 )) && echo $(( l > 5 ? l : 5 )) || echo "$1"; }
gpu_tests() {
    log "pytest -m gpu"; timeout "$(left 75)" $PY -m pytest -m gpu -v -p no:cacheprovider >"$R/pytest_gpu.log" 2>&1
    tail -n 3 "$R/pytest_gpu.log"
}
leftovers() {
    $PY bench/bench_gpu.py env --out "$R"; save leftovers
    gpu_tests; save leftovers
    log decode; timeout "$(left 120)" $PY bench/bench_gpu.py decode --out "$R" --device $DEV --greedy-timeout 40 \
        --digits $GREEDY_DIGITS; save leftovers
    log addition; timeout "$(left 150)" $PY bench/bench_gpu.py addition --out "$R" --device $DEV --timeout 75 \
        --greedy-timeout 60 --digits ${ADD_BIG:-1000000} --dtypes float32 --greedy-digits ${GREEDY_BIG:-100000}; save leftovers
    log turing; timeout "$(left 110)" $PY bench/bench_gpu.py turing --out "$R" --device $DEV --greedy-seconds 40 \
        --tokens $TM_TOKENS; save leftovers
    log "pytest (whole suite)"; timeout "$(left 200)" $PY -m pytest -n 14 -v -p no:cacheprovider $PYTEST_SELECT \
        >"$R/pytest.log" 2>&1
    grep -E "FAILED|ERROR" "$R/pytest.log" | head -n 20; tail -n 3 "$R/pytest.log"; save leftovers
    log done
}

# what is still unmeasured on a GPU, in one call of under 10 minutes: the GPU tests (edited since
# they last ran there), the 10^5-token Turing trace (it compiles since equalities use bit codes), the
# 3-digit trained-model certificate with its forward passes on CUDA, and the authors' training shape
# for TRAIN_SECONDS with its evaluation at 50-200 digits
remaining() {
    $PY bench/bench_gpu.py env --out "$R"; save remaining
    gpu_tests; save remaining
    log turing; timeout "$(left 150)" $PY bench/bench_gpu.py turing --out "$R" --device $DEV --greedy-seconds 30 \
        --tokens ${TM_BIG:-100000}; save remaining
    log certify; timeout "$(left 150)" $PY bench/bench_gpu.py certify --out "$R" --devices $DEV --digits ${CERT_DIGITS:-3} --samples 1000 \
        >"$R/certify.log" 2>&1; tail -n 3 "$R/certify.log"; save remaining
    local name=paper flags="--heads 4 --d-model 512 --d-mlp 2048 --attn-scale 1 --batch-size 1000 --lr 1e-4"
    log "train $name"; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout -s INT "$(left $((TRAIN_SECONDS + 30)))" \
        $PY -m lengthgen.train $COMMON $flags --steps ${PAPER_STEPS:-3000} --seed 0 --checkpoint-every 500 \
        --out "$R/$name" --force >"$R/train_$name.log" 2>&1; tail -n 2 "$R/train_$name.log"; save remaining
    for n in 50 100 200; do
        timeout "$(left 30)" $PY -m lengthgen.evaluate --checkpoint "$R/$name" --digits $n --samples 1000 --device $DEV \
            --no-progress --json --out "$R/eval_${name}_$n.json" --force >/dev/null 2>>"$R/eval_$name.log"
    done
    save remaining
    log done
}

# ------------------------------------------------------------------ paper-recipe training
# name|flags: the authors' shape (1 layer, 4 heads, d_model 512, FFN 2048, no 1/sqrt(d) scaling,
# batch 1000, lr 1e-4, trained on 1-30 digits, position table for 200) reduced in steps only;
# the same shape with packing and lr 1e-3; and the small packed recipe of docs/training.md.
RUNS=(
  "paper|--heads 4 --d-model 512 --d-mlp 2048 --attn-scale 1 --batch-size 1000 --lr 1e-4"
  "paper_packed|--heads 4 --d-model 512 --d-mlp 2048 --attn-scale 1 --batch-size 500 --lr 1e-3 --pack 0.5"
  "small_packed|--heads 2 --d-model 128 --attn-scale 1 --batch-size 256 --lr 1e-3 --pack 0.5"
)
COMMON="--layers 1 --train-digits 1-30 --max-digits 200 --device $DEV --threads 1 --no-progress"
TRAIN_SECONDS=${TRAIN_SECONDS:-150}

CALIB_STEPS=${CALIB_STEPS:-40}

train_all() {
    # a few steps of each run side by side give its seconds per step under the same sharing
    for spec in "${RUNS[@]}"; do
        name=${spec%%|*}; flags=${spec#*|}
        TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout 90 $PY -m lengthgen.train $COMMON $flags --steps $CALIB_STEPS \
            --log-every $((CALIB_STEPS / 4)) --out "$R/calib_$name" --force >"$R/calib_$name.log" 2>&1 &
    done
    wait
    for spec in "${RUNS[@]}"; do
        name=${spec%%|*}; flags=${spec#*|}
        steps=$($PY - "$R/calib_$name" "$TRAIN_SECONDS" <<'EOF'
import glob, json, sys
try:  # seconds per step between the first and the last log entry (the first includes the warm-up)
    state = json.load(open(sorted(glob.glob(sys.argv[1] + "/checkpoints/step_*/state.json"))[-1]))
    log = [e for e in state["log"] if "seconds" in e]
    per_step = (log[-1]["seconds"] - log[0]["seconds"]) / (log[-1]["step"] - log[0]["step"])
    print(max(200, int(float(sys.argv[2]) * 0.8 / per_step) // 100 * 100))
except (IndexError, KeyError, ValueError, ZeroDivisionError):
    print(1000)
EOF
)
        log "train $name: $steps steps"
        echo "$name $steps $COMMON $flags" >>"$R/train_plan.txt"
        TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout -s INT $((TRAIN_SECONDS + 30)) $PY -m lengthgen.train $COMMON $flags \
            --steps "$steps" --seed 0 --checkpoint-every 100000 --out "$R/$name" --force >"$R/train_$name.log" 2>&1 &
    done
}

evaluate_all() {
    for spec in "${RUNS[@]}"; do
        name=${spec%%|*}
        (for n in 30 50 100 200; do
            timeout 30 $PY -m lengthgen.evaluate --checkpoint "$R/$name" --digits $n --samples 1000 --device $DEV \
                --no-progress --json --out "$R/eval_${name}_$n.json" --force >/dev/null 2>>"$R/eval_$name.log"
        done) &
    done
    wait
}

throughput() {
    log "training (side by side)"; train_all; save throughput
    log "certify"; timeout 170 $PY bench/bench_gpu.py certify --out "$R" --devices cpu $DEV --digits 2 3 --samples 1000 >"$R/certify.log" 2>&1 &
    log "pytest (whole suite, gpu tests included)"
    timeout 170 $PY -m pytest -n 9 -v -p no:cacheprovider $PYTEST_SELECT --junitxml="$R/pytest.xml" >"$R/pytest.log" 2>&1
    grep -E "FAILED|ERROR" "$R/pytest.log" | head -n 20; tail -n 3 "$R/pytest.log"; save throughput  # -v: names survive a timeout
    log "precision (TF32 off)"; timeout 75 $PY bench/bench_gpu.py precision --out "$R" --device $DEV --tf32 off >"$R/precision_off.log" 2>&1
    log "precision (TF32 on, float32)"; timeout 30 $PY bench/bench_gpu.py precision --out "$R" --device $DEV --tf32 on --dtypes float32 \
        >"$R/precision_on.log" 2>&1
    save throughput
    log "waiting for training"; wait
    for spec in "${RUNS[@]}"; do  # the weights travel apart (one file each); the rest with the results
        name=${spec%%|*}
        [ -n "${OUT:-}" ] && [ -d "$R/$name" ] || continue
        what="$R/$name/model.safetensors"; [ -f "$what" ] || what=$(ls -d "$R/$name"/checkpoints/step_* | tail -n 1)
        tar czf "$OUT/weights_$name.tgz" --exclude optimizer.safetensors "$what"
    done
    save throughput
    log evaluate; evaluate_all
    save throughput
    log done
}

# results so far to $OUT (a killed call still returns them); weights are left out here
save() {
    [ -n "${OUT:-}" ] || return 0
    tar czf "$OUT/results_$1.tgz" --exclude '*.safetensors' "$R" 2>/dev/null
}

setup
case "${1:-}" in
    timing) timing ;;
    throughput) throughput ;;
    leftovers) leftovers ;;
    remaining) remaining ;;
    *) echo "usage: bash bench/gpu_session.sh timing|throughput|leftovers|remaining"; exit 2 ;;
esac
