#!/usr/bin/env bash
# Retraining the Medusa heads on the GPU machine, one stage per call, all calls on one warm machine
# (/root/sv3 must survive between them); run from the carried copy of the repo with the default model staged
# (docs/gpu.md) and Spec-Bench's prompts in data/spec_bench/ (evaluation only):
#   STAGE=data   bash scripts/gpu_medusa.sh   the target writes a new data set (~6 min); GERMAN=0.15: a share of
#                                             answers translated into German and back (train/data.py)
#   STAGE=train VARIANT=l3 LAYERS=3 bash scripts/gpu_medusa.sh   one variant (5 heads of LAYERS blocks) for
#                                             MINUTES (default 5) of training, stopped at LIMIT seconds (540);
#                                             RESUME=1 goes on from its checkpoint in a later call; INIT=FOLDER
#                                             starts from those heads (a warm start)
#   (Two variants side by side in one call ran past the 10-minute call limit without a word on 2026-11-26,
#    losing both: one variant a call, under a timeout, with checkpoints, is the safe way.)
#   STAGE=bench  VARIANT=l3 bash scripts/gpu_medusa.sh   one variant on 26 prompts (2 per category), chain and
#                                             trees (SHIPPED=1: the shipped heads beside it)
#   STAGE=sim    VARIANT=l3|shipped TREES=127,511   greedy continuations of all 480 prompts (batched), then
#                                             Medusa trees replayed on them (scripts/medusa_sim.py; no verifier)
#   STAGE=all    VARIANT=l3|shipped [PROMPTS_FILE=runs/part1.jsonl] [FP32=1] bash scripts/gpu_medusa.sh
#                                             all 480 prompts or a part (bf16), 13 in float32
# Results and the weights come back under $OUT.
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
WORK=/root/sv3
mkdir -p "$WORK"
train() {  # $1 variant name, $2 residual blocks per head
  python3 -m specviz train-drafter --method medusa --target default --out "$WORK/$1" --data "$WORK/data.pt" \
      --heads 5 --layers "$2" --draft-vocab ${VOCAB:-16384} --minutes ${MINUTES:-6} --eval-every 500 ${RESUME:+--resume} \
      ${INIT:+--init "$INIT"} ${LR:+--lr "$LR"} \
      > "$WORK/$1.train.log" 2>&1
}
bench() {  # $1 name, $2 dtype, $3 methods, $4 heads folder (empty: shipped), $5 prompt selection
  python3 -m specviz bench --prompts ${PROMPTS_FILE:-data/spec_bench/question.jsonl} $5 --methods "$3" --max-new-tokens 256 --dtype "$2" \
      ${4:+--heads "$4"} --out "$OUT/$1.json" 2>&1 | quiet | tail -30 | tee "$OUT/$1.log"
}
case ${STAGE:-data} in
  data)
    python3 -m specviz train-drafter --method medusa --target default --out "$WORK/l1" --data "$WORK/data.pt" \
        --prompts ${PROMPTS:-32000} --gen-batch ${GEN_BATCH:-1024} --gen-minutes ${GEN_MINUTES:-4.5} \
        --german-share ${GERMAN:-0} --extra-minutes ${EXTRA:-0.5} --data-only 2>&1 | quiet | tail -20
    ls -la "$WORK" ;;
  train)
    v=${VARIANT:-l1}
    timeout ${LIMIT:-540} bash -c "$(declare -f train quiet); WORK=$WORK MINUTES=${MINUTES:-5} RESUME=${RESUME:-} INIT=${INIT:-} LR=${LR:-} train $v ${LAYERS:-1}"
    echo "== $v (exit $?: 124 = stopped by LIMIT, resume with RESUME=1)"
    quiet < "$WORK/$v.train.log" | grep "held-out\|vocabulary\|training conversations\|Error\|error" | tail -12
    mkdir -p "$OUT/$v" && cp "$WORK/$v"/config.json "$WORK/$v"/medusa_lm_head.safetensors "$WORK/$v"/loss.png "$OUT/$v/" 2>/dev/null ;;
  bench)
    if [ -n "${SHIPPED:-}" ]; then bench shipped-26 bfloat16 medusa:4,medusa:4:32,medusa:5:64 "" "--per-category 2"; fi
    bench "${VARIANT:-l3}-26" bfloat16 ${METHODS:-medusa:4,medusa:4:32,medusa:5:64,medusa:5:127} "$WORK/${VARIANT:-l3}" "--per-category 2" ;;
  sim)
    heads=$([ "$VARIANT" = shipped ] || echo "$WORK/$VARIANT")
    python3 -m scripts.medusa_sim --prompts data/spec_bench/question.jsonl --cache "$WORK/greedy-480.json" --batch 480 --dtype float32 \
        --trees ${TREES:-127,511} ${heads:+--heads "$heads"} 2>&1 | quiet | tee "$OUT/sim-$VARIANT.log" | tail -8 ;;
  all)  # VARIANT=shipped: the heads in assets/; PROMPTS_FILE=runs/partN.jsonl: a third of the 480; FP32=1: also 13 in float32
    heads=$([ "$VARIANT" = shipped ] || echo "$WORK/$VARIANT")
    part=$(basename "${PROMPTS_FILE:-data/spec_bench/question.jsonl}" .jsonl)
    bench "$VARIANT-$part-bf16" bfloat16 ${METHODS:-medusa:5:64} "$heads" ""
    if [ -n "${FP32:-}" ]; then bench "$VARIANT-13-fp32" float32 ${METHODS:-medusa:5:64} "$heads" "--per-category 1"; fi ;;
esac
