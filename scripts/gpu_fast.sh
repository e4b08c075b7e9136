#!/usr/bin/env bash
# The fast path on the GPU machine , one stage per call; run from the carried copy of the repo with
# the default model staged (docs/gpu.md) and Spec-Bench's prompts in data/spec_bench/:
#   STAGE=check bash scripts/gpu_fast.sh   CUDA tests (graphs, the attention kernel, EAGLE trees), then 26 prompts
#                                          (2 per category): plain, ngram, EAGLE trees, adaptive on EAGLE trees
#   STAGE=all PART=runs/part1.jsonl HF=1 bash scripts/gpu_fast.sh
#                                          one part of the 480 prompts (HF=1: transformers' generate() on 3)
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
case ${STAGE:-check} in
  check)
    python3 -m pytest -q -x -p no:cacheprovider tests/test_eagle.py tests/test_medusa.py tests/test_head_drafters.py tests/test_runners.py \
        -k "eagle_tree or graph or compiled or cuda or triton or warm_up or adaptive" 2>&1 | tail -5 | tee "$OUT/pytest.log"
    python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 2 --max-new-tokens 256 --dtype bfloat16 \
        --methods ${METHODS:-ngram:8,ngram:16,eagle:6:31,eagle:7:63,adaptive:6:31,adaptive:7:63} --out "$OUT/check-26.json" 2>&1 | quiet \
        | grep "overall\|^method\|^vs \|rror" | tee "$OUT/check-26.log" ;;
  all)
    name=$(basename "${PART:-data/spec_bench/question.jsonl}" .jsonl)
    python3 -m specviz bench --prompts ${PART:-data/spec_bench/question.jsonl} --max-new-tokens 256 --dtype bfloat16 \
        --methods ${METHODS:-ngram:16,eagle:7:63,adaptive:7:63} ${HF:+--transformers hf-generate,hf-prompt-lookup --transformers-limit 3} \
        --out "$OUT/all-$name.json" 2>&1 | quiet | tail -50 | tee "$OUT/all-$name.log" ;;
esac
