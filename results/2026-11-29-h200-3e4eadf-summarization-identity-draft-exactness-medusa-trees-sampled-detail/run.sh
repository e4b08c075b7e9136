#!/usr/bin/env bash
# On the GPU machine (one H200), the default model staged (docs/gpu.md), from the repository's root:
# source scripts/gpu_common.sh first. The first call ran at c050665, the others at 3e4eadf; the last at 3e4eadf
# too, before top-k and top-p ran eagerly inside the device loop's graphs.
set -u
# 1. float32 identity of the model drafters on the 32 summarization prompts (question_id 289-320)
python3 -c "import json,sys;[sys.stdout.write(l) for l in open('data/spec_bench/question.jsonl') if 289<=json.loads(l)['question_id']<=320]" > /tmp/sum.jsonl
timeout 270 python3 -m specviz bench --prompts /tmp/sum.jsonl --max-new-tokens 128 --dtype float32 \
    --methods eagle:6:31,medusa:4,draft:4@0.5 --draft distilled --out $OUT/fp32-summarization.json
# 2. the CUDA tests of the device loop (pytest-first-try.log at c050665, pytest.log at 3e4eadf)
timeout 170 python3 -m pytest -q tests/test_device_loop.py -k "never_waits or through_graphs"
# 3. Medusa's trees on the device loop beside its chain and EAGLE's tree; bfloat16, 26 prompts
timeout 240 python3 -m specviz bench --max-new-tokens 256 --prompts data/spec_bench/question.jsonl --per-category 2 \
    --dtype bfloat16 --methods medusa:4,medusa:4:31,medusa:4:63,eagle:6:31 --out $OUT/medusa-trees.json
# 4. the app's detailed records, sampled, on the device loop and on the host loop
timeout 150 python3 -m scripts.detail_speed --methods eagle:4,retrieval:16:31 --temperature 0.8 --repeats 3 \
    --out $OUT/detail.json
# 5. the draft model's sampled exactness through the device loop, float32
timeout 560 python3 -m specviz check-exactness --device cuda --method draft --draft distilled --gamma 4 \
    --draft-stop 0.5 --samples 2000
# 6. sampled, temperature 1.0, 26 prompts
timeout 320 python3 -m specviz bench --max-new-tokens 256 --prompts data/spec_bench/question.jsonl --per-category 2 \
    --dtype bfloat16 --temperature 1.0 --seed 0 --draft distilled --methods eagle:2,eagle:4,medusa:4,draft:4 \
    --out $OUT/sampled.json
# 7. EAGLE's tree with top-k, sampled exactness (fell back to the host loop; cut at 230 s)
python3 -m specviz check-exactness --device cuda --method eagle --gamma 4 --tree 15 --top-k 20 --samples 2000
