#!/usr/bin/env bash
# One call on the GPU machine: compatibility tests, checks and forward timings, then Spec-Bench.
# Run from the repository's root (a carried copy of it):
#   MODE=dev  bash scripts/gpu_run.sh   (checks, cost curves, a small bench: 2 prompts per category)
#   MODE=full bash scripts/gpu_run.sh   (all 480 prompts; transformers on a subset; float32 identity)
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export SPECVIZ_DEFAULT_GGUF=${SPECVIZ_DEFAULT_GGUF:-/root/specviz-gpu/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
MODE=${MODE:-dev}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/env.txt"
start=$SECONDS
step() { echo "== $1 at $((SECONDS - start)) s"; }

if [ "$MODE" = dev ]; then
  step pytest
  python3 -m pytest tests/test_runners.py tests/test_engine.py -q -x -k "not default_model and not distribution" 2>&1 | tail -15 | tee "$OUT/pytest.log"
  step check
  python3 -m scripts.gpu_check --out "$OUT/check.json" 2>&1 | grep -v "Converting\|Loading weights" | tee "$OUT/check.log"
  step bench-bf16
  python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 2 --methods ngram,adaptive,early-exit \
      --gamma ${GAMMA:-8} --max-new-tokens 256 --dtype bfloat16 --transformers hf-generate,hf-prompt-lookup \
      --transformers-per-category 0 --limit 2 --out "$OUT/smoke.json" 2>&1 | grep -v "Converting\|Loading weights\|bench:" | tail -20
  python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 2 --methods ngram,adaptive,early-exit \
      --gamma ${GAMMA:-8} --max-new-tokens 256 --dtype bfloat16 --out "$OUT/dev_bf16.json" 2>&1 \
      | grep -v "Converting\|Loading weights\|bench:" | tee "$OUT/dev_bf16.log"
  step bench-fp32
  python3 -m specviz bench --prompts data/spec_bench/question.jsonl --per-category 2 --methods ngram \
      --gamma ${GAMMA:-8} --max-new-tokens 256 --dtype float32 --out "$OUT/dev_fp32.json" 2>&1 \
      | grep -v "Converting\|Loading weights\|bench:" | tee "$OUT/dev_fp32.log"
fi
if [ "$MODE" = full ]; then
  step bench
  python3 -m scripts.gpu_bench --out "$OUT" --budget ${BUDGET:-540} --stages ${STAGES:-A,D,B,C,E} --hf-limit ${HF_LIMIT:-3} 2>&1 \
      | grep -v "Converting\|Loading weights\|bench:\|clean_up_tokenization"
fi
step done
