#!/usr/bin/env bash
# On the GPU machine, the default model staged (docs/gpu.md), Spec-Bench's prompts from data/spec_bench/:
# the device loop (specviz/device_loop.py) measured.
#   STAGE=check: its CUDA tests, then 2 prompts a category, host loop (SPECVIZ_DEVICE_LOOP=0) and device loop
#                alternating, twice;
#   STAGE=sweep: its CUDA tests, the lookups' GPU time (scripts/gpu_lookup_profile.py), 2 prompts a category;
#   STAGE=prefill: the CUDA tests of the loop and of prompts in chunks, then prefill timings
#                (scripts/gpu_prefill_timing.py);
#   STAGE=all:   all 480 prompts, bfloat16, transformers' generate() on 3 of them;
#   STAGE=fp32:  13 prompts (one a category) in float32: identity with plain.
# METHODS: the methods beside plain (default ngram:16,retrieval:16).
source "$(dirname "$0")/gpu_common.sh"
STAGE=${STAGE:-check}
METHODS=${METHODS:-ngram:16,retrieval:16}
PROMPTS_FILE=${PROMPTS_FILE:-data/spec_bench/question.jsonl}
bench() { python3 -m specviz bench --prompts "$PROMPTS_FILE" --max-new-tokens 256 --methods "$METHODS" "$@" 2>&1 | quiet; }
if [ "$STAGE" = check ]; then
  python3 -m pytest -q -x tests/test_device_loop.py -k "graphs or waits" 2>&1 | grep -v "^DEBUG\|^\s*$" | tail -40 | tee "$OUT/pytest.log"; grep -q " passed" "$OUT/pytest.log" && ! grep -q "failed" "$OUT/pytest.log" || exit 1
  for round in 1 2; do
    SPECVIZ_DEVICE_LOOP=0 bench --per-category 2 --dtype bfloat16 --out "$OUT/host-$round.json" | tail -4
    SPECVIZ_DEVICE_LOOP=1 bench --per-category 2 --dtype bfloat16 --out "$OUT/device-$round.json" | tail -4
  done
fi
if [ "$STAGE" = sweep ]; then  # the lookups' GPU time, then draft lengths side by side (device loop)
  python3 -m pytest -q -x tests/test_device_loop.py -k "graphs or waits" 2>&1 | grep -v "^DEBUG\|^\s*$" | tail -3 | tee "$OUT/pytest.log"
  python3 -m scripts.gpu_lookup_profile 2>&1 | grep -v "Warning\|_warn_once" | tee "$OUT/lookup-profile.txt"
  bench --per-category 2 --dtype bfloat16 --out "$OUT/sweep.json" | grep "overall"
fi
if [ "$STAGE" = prefill ]; then  # CUDA tests (chunks with and without the output layer), then prefill timings
  python3 -m pytest -q -x tests/test_device_loop.py tests/test_runners.py -k "graphs or waits or long_inputs or stand_in" 2>&1 \
      | grep -v "^DEBUG\|^\s*$" | tail -3 | tee "$OUT/pytest.log"
  grep -q " passed" "$OUT/pytest.log" && ! grep -q "failed" "$OUT/pytest.log" || exit 1
  python3 -m scripts.gpu_prefill_timing 2>&1 | grep -v "Converting\|Loading weights\|Warning\|warn" | tee "$OUT/prefill-timing.txt"
fi
if [ "$STAGE" = all ]; then
  bench --dtype bfloat16 --transformers hf-generate,hf-prompt-lookup --transformers-limit ${HF_LIMIT:-3} \
      --out "$OUT/bf16-all.json"
fi
if [ "$STAGE" = fp32 ]; then
  bench --per-category 1 --dtype float32 --out "$OUT/fp32-13prompts.json"
fi
