#!/usr/bin/env bash
# Retrieval drafting on the GPU machine, one stage per call; run from the carried copy of the repo with the
# default model staged (docs/gpu.md) and Spec-Bench's prompts in data/spec_bench/:
#   STAGE=check bash scripts/gpu_retrieval.sh   CUDA tests of trees and adaptive, then 26 prompts (2 per category):
#                                               plain, ngram:16, retrieval chains and trees, adaptive with each lookup
#   STAGE=all bash scripts/gpu_retrieval.sh     all 480 prompts: ngram:16, retrieval:16, retrieval:16:31 (HF=1: and
#                                               transformers' generate() on 3)
#   STAGE=fp32 bash scripts/gpu_retrieval.sh    CUDA tests of graphs and trees, then float32 on 13 prompts (one per
#                                               category): every method's output must equal plain's
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
case ${STAGE:-check} in
  check)
    python3 -m pytest -q -x -p no:cacheprovider tests/test_runners.py tests/test_drafters_default.py \
        -k "tree or graph or cuda or adaptive or retrieval" 2>&1 | tail -5 | tee "$OUT/pytest.log"
    for lookup in ngram retrieval; do
      python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 2 --max-new-tokens 256 --dtype bfloat16 \
          --methods ${METHODS:-ngram:16,retrieval:16,retrieval:16:31,retrieval:16:63,adaptive:7:63} --adaptive-lookup $lookup \
          --out "$OUT/check-26-$lookup.json" 2>&1 | quiet | grep "overall\|^method\|rror" | tee "$OUT/check-26-$lookup.log"
    done ;;
  all)
    python3 -m specviz bench --prompts data/spec_bench/question.jsonl --max-new-tokens 256 --dtype bfloat16 \
        --methods ${METHODS:-ngram:16,retrieval:16,retrieval:16:31} ${HF:+--transformers hf-generate,hf-prompt-lookup --transformers-limit 3} \
        --out "$OUT/retrieval-all.json" 2>&1 | quiet | tail -50 | tee "$OUT/retrieval-all.log" ;;
  fp32)
    python3 -m pytest -q -x -p no:cacheprovider tests/test_runners.py tests/test_tree.py tests/test_drafters_default.py \
        -k "tree or graph or cuda or visib or retrieval" 2>&1 | tail -2 | tee "$OUT/pytest.log"
    python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 1 --max-new-tokens 256 --dtype float32 \
        --methods ${METHODS:-ngram:16,retrieval:16,retrieval:16:63} \
        --out "$OUT/retrieval-fp32.json" 2>&1 | quiet | grep "overall\|^method\|rror" | tee "$OUT/retrieval-fp32.log" ;;
esac
