#!/usr/bin/env bash
# The trained drafters on the GPU machine, one stage per call; run from the carried copy of the repo
# with Spec-Bench's prompts in data/spec_bench/ (evaluation only) and the default model staged (docs/gpu.md):
#   STAGE=bench  bash scripts/gpu_drafters.sh   shipped eagle and medusa on Spec-Bench, bf16 and float32
#   STAGE=train  bash scripts/gpu_drafters.sh   new data (more kinds of prompt), then EAGLE training; the
#                                               call's time limit may stop it: STAGE=resume goes on
#   STAGE=resume bash scripts/gpu_drafters.sh   resume EAGLE training to its budget, then bench it
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
WORK=/root/sv2
mkdir -p "$WORK"
bench() {  # $1 name, $2 dtype, $3 methods, $4 heads (optional)
  python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category ${PER_CATEGORY:-1} --methods "$3" --gamma ${GAMMA:-4} \
      --max-new-tokens 256 --dtype "$2" ${4:+--heads "$4"} --out "$OUT/$1.json" 2>&1 | quiet | tee "$OUT/$1.log"
}
case ${STAGE:-bench} in
  bench)
    bench drafters-bf16 bfloat16 eagle,medusa,ngram,adaptive
    bench drafters-fp32 float32 eagle,medusa ;;
  train)
    timeout ${LIMIT:-560} python3 -m specviz train-drafter --method eagle --target default --out "$WORK/eagle" --data "$WORK/data.pt" \
        --prompts ${PROMPTS:-24000} --gen-batch 1024 --gen-minutes ${GEN_MINUTES:-3.5} --draft-vocab ${VOCAB:-16384} \
        --minutes ${MINUTES:-10} --eval-every 400 2>&1 | tr "\r" "\n" | grep -v "s/s\]\|it/s\]\|step/s\]" | tail -40 ;;
  resume)
    python3 -m specviz train-drafter --method eagle --target default --out "$WORK/eagle" --data "$WORK/data.pt" \
        --draft-vocab ${VOCAB:-16384} --minutes ${MINUTES:-10} --eval-every 400 --resume 2>&1 | tr "\r" "\n" | grep -v "s/s\]\|it/s\]\|step/s\]" | tail -40
    mkdir -p "$OUT/eagle" && cp "$WORK/eagle"/config.json "$WORK/eagle"/model.safetensors "$WORK/eagle"/loss.png "$OUT/eagle/"
    bench eagle2-bf16 bfloat16 eagle "$WORK/eagle" ;;
esac
