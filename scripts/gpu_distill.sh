#!/usr/bin/env bash
# Distilling the default target's small draft model on the GPU machine, one stage per call, all calls on one
# warm machine (/root/dm survives between them); run from the carried copy of the repo with the default model
# staged (docs/gpu.md) and Spec-Bench's prompts in data/spec_bench/ (evaluation only):
#   STAGE=data  bash scripts/gpu_distill.sh     the target writes its data set (Magpie prompts, its answers;
#                                             GERMAN=0.1: German round trips too, as for the Medusa warm start)
#   STAGE=train VARIANTS="l2-first:2:first" MINUTES=3 bash scripts/gpu_distill.sh
#                                             each variant (name:layers:init) in turn, under its own timeout
#                                             (LIMIT, default 500 s): one a call is the safe way (three side by
#                                             side in one call wrote nothing in 9 minutes on 2026-11-27)
#   STAGE=bench VARIANT=l2-first METHODS=... bash scripts/gpu_distill.sh   all 480 prompts, bf16 (PER_CATEGORY=N: fewer)
#                                             DRAFT=distilled instead of VARIANT: the shipped model (carry its folder)
# Results and the weights come back under $OUT.
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
WORK=/root/dm
mkdir -p "$WORK"
case ${STAGE:-data} in
  data)
    python3 -m specviz train-drafter --method draft-model --target default --out "$WORK/data" --data "$WORK/data.pt" \
        --prompts ${PROMPTS:-32000} --gen-batch ${GEN_BATCH:-1024} --gen-minutes ${GEN_MINUTES:-5} \
        --extra-minutes ${EXTRA:-0.5} --german-share ${GERMAN:-0} --seed ${SEED:-0} --data-only 2>&1 | quiet | tail -20
    ls -la "$WORK" ;;
  train)
    for spec in ${VARIANTS:-l2-first:2:first}; do
      IFS=: read -r name layers init <<< "$spec"
      timeout ${LIMIT:-500} python3 -m specviz train-drafter --method draft-model --target default --out "$WORK/$name" \
          --data "$WORK/data.pt" --layers "$layers" --init-layers "$init" --draft-vocab ${VOCAB:-8192} \
          --minutes ${MINUTES:-3} --eval-every 1000 ${LR:+--lr "$LR"} ${BATCH_TOKENS:+--batch-tokens "$BATCH_TOKENS"} \
          > "$WORK/$name.log" 2>&1
    done
    for spec in ${VARIANTS:-l2-first:2:first}; do
      name=${spec%%:*}
      echo "== $name"; quiet < "$WORK/$name.log" | grep "held-out\|vocabulary\|started from\|conversations\|Error\|error" | tail -8
      mkdir -p "$OUT/$name" && cp "$WORK/$name"/config.json "$WORK/$name"/model-*.safetensors "$WORK/$name"/loss.png "$OUT/$name/" 2>/dev/null
    done ;;
  bench)
    python3 -m specviz bench --prompts data/spec_bench/question.jsonl ${PER_CATEGORY:+--per-category $PER_CATEGORY} \
        --methods "${METHODS:-draft:4}" --draft "${DRAFT:-$WORK/${VARIANT:-l2-first}}" --max-new-tokens ${TOKENS:-256} \
        --dtype ${DTYPE:-bfloat16} --out "$OUT/bench-${VARIANT:-${DRAFT:-l2-first}}.json" 2>&1 | quiet | tail -40 | tee "$OUT/bench.log" ;;
esac
