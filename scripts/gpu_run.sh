#!/usr/bin/env bash
# The GPU harness: one stage per call on the GPU machine, run from the repository's root (a carried copy of it)
# with the default model staged (docs/gpu.md) and Spec-Bench's prompts in data/spec_bench/ (evaluation only).
#   STAGE=check     the CUDA tests (graphs, compile, the attention kernel, the device loop, EAGLE's trees), then
#                   the fast path's forward checked against transformers' and timed (scripts/gpu_check.py)
#   STAGE=identity  float32, PER_CATEGORY prompts a category (default 2: 26 prompts): every method's output must
#                   equal plain decoding's (the bench's "identical" column, 100%)
#   STAGE=headline  bfloat16, all 480 prompts (PROMPTS=FILE: a part of them), METHODS beside plain
#   STAGE=bench     the staged benchmark of scripts/gpu_bench.py (transformers' generate() beside specviz)
# METHODS: METHOD:GAMMA[:TREE],... (each stage has a default); DRAFT: the draft model for `draft` (distilled).
# OUT: where results go (default /tmp/out). On a machine without a GPU the stages run on the CPU, for checking
# the harness itself: PER_CATEGORY=1 MAX_NEW_TOKENS=8 STAGE=identity bash scripts/gpu_run.sh
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
PROMPTS=${PROMPTS:-data/spec_bench/question.jsonl}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-256}
bench() {  # $1 name, $2 dtype, $3 methods; the rest goes to the bench
  local name=$1 dtype=$2 methods=$3; shift 3
  case ",$methods" in *,draft*) set -- --draft "${DRAFT:-distilled}" "$@" ;; esac  # only `draft` loads a draft model
  python3 -m specviz bench --prompts "$PROMPTS" --max-new-tokens "$MAX_NEW_TOKENS" --dtype "$dtype" --methods "$methods" \
      --out "$OUT/$name.json" "$@" 2>&1 | quiet | tee "$OUT/$name.log"
}
case ${STAGE:-check} in
  check)
    python3 -m pytest -q -x -p no:cacheprovider tests/test_runners.py tests/test_device_loop.py tests/test_eagle.py \
        tests/test_medusa.py tests/test_head_drafters.py tests/test_batch.py \
        -k "cuda or graph or graphs or compiled or triton or waits or eagle_tree or warm_up" 2>&1 | tail -15 \
        | tee "$OUT/pytest.log"
    python3 -m scripts.gpu_check --out "$OUT/check.json" 2>&1 | quiet | tee "$OUT/check.log" ;;
  identity)
    bench identity-fp32 float32 "${METHODS:-ngram:16,retrieval:16,retrieval:16:31,eagle:6:31,medusa:4,draft:4}" \
        --per-category "${PER_CATEGORY:-2}" ;;
  headline)
    bench "headline-$(basename "$PROMPTS" .jsonl)" bfloat16 "${METHODS:-retrieval:16:31,ngram:8}" ;;
  bench)
    python3 -m scripts.gpu_bench --out "$OUT" --budget "${BUDGET:-540}" --stages "${STAGES:-A,D,B,C,E}" \
        --hf-limit "${HF_LIMIT:-3}" 2>&1 | quiet ;;
  *) echo "unknown STAGE=$STAGE: check, identity, headline or bench" >&2; exit 2 ;;
esac
