#!/usr/bin/env bash
# On the GPU machine, the default model staged (docs/gpu.md), Spec-Bench's prompts from data/spec_bench/: the
# drafters that are models (EAGLE, Medusa, the distilled draft model) and sampling in the device loop, measured.
# Every stage is one call; the bench stages print each method's step figures (scripts/step_figures.py: drafting,
# the verify pass and the rest of a step, in ms) and write the bench's JSON under $OUT. Times on an H200 (a
# bench process spends some 3 minutes loading and compiling before its first timed run; less where torch's
# compile cache already holds the same graphs):
#   STAGE=check                 2 prompts a category (26), greedy, every model drafter side by side, then
#                               temperature 1.0, then the CUDA tests (sampled runs with top-k and top-p staying on
#                               the device loop among them; cut at 170 s, TESTS_S) (~10 min);
#   STAGE=tests                 those CUDA tests alone (TESTS: their -k; ~5 min);
#   STAGE=greedy PART=k PARTS=n all 480 prompts in n parts, part k, bfloat16, greedy: plain, retrieval:16:31,
#                               eagle:6:31, eagle:$BEST_EAGLE, draft:4@0.5 (distilled), medusa:4
#                               (~1.4 s a prompt: PARTS=3, ~7 min a call);
#   STAGE=sampled PART=k PARTS=n  all 480, bfloat16, temperature 1.0: plain and $SAMPLED
#                               (~1.2 s a prompt: PARTS=3, ~6.5 min a call);
#   STAGE=fp32 PART=k PARTS=n   all 480, float32, greedy, the greedy stage's methods: each output against plain's
#                               (~2 s a prompt: PARTS=4, ~7 min a call);
#   STAGE=exactness PART=1|2|3  check-exactness --device cuda (float32), 3000 samples, each with its control:
#                               1 Medusa's chain with top-p, retrieval's tree, an n-gram chain with top-k (~2.5 min
#                               each); 2 EAGLE's tree with top-k and its chain; 3 the draft model's (~8 min at
#                               3000: give it SAMPLES=2000 CHECK_SECONDS=560). CHECK_SECONDS (270) bounds each;
#   STAGE=profile               scripts/graph_profile.py: each method's lookup and verify graphs under
#                               torch.profiler, their kernels counted and timed (~3 min).
# GREEDY_METHODS replaces the greedy and fp32 stages' methods (plain always runs).
# Afterwards, here: python -m scripts.step_figures greedy-1.json greedy-2.json greedy-3.json pools the parts.
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "$0")/gpu_common.sh"
STAGE=${STAGE:-check}
PART=${PART:-1}
PARTS=${PARTS:-3}
BEST_EAGLE=${BEST_EAGLE:-4:15}
SAMPLED=${SAMPLED:-eagle:2,eagle:4,retrieval:16:31}
GREEDY_METHODS=${GREEDY_METHODS:-"retrieval:16:31,eagle:6:31,eagle:$BEST_EAGLE,draft:4@0.5,medusa:4${EXTRA:+,$EXTRA}"}
PROMPTS_FILE=${PROMPTS_FILE:-data/spec_bench/question.jsonl}
bench() { python3 -m specviz bench --max-new-tokens 256 --draft distilled "$@" 2>&1 | quiet | grep -v "^\s*$"; }
part() {  # lines of part $1 of $2 of the prompt file, into $OUT/prompts-$1.jsonl
  local total lines; total=$(wc -l < "$PROMPTS_FILE"); lines=$(( (total + $2 - 1) / $2 ))
  tail -n +$(( ($1 - 1) * lines + 1 )) "$PROMPTS_FILE" | head -n "$lines" > "/tmp/prompts-$1-of-$2.jsonl"
  echo "/tmp/prompts-$1-of-$2.jsonl"
}
figures() { python3 -m scripts.step_figures "$@" | tee -a "$OUT/figures.txt"; }
if [ "$STAGE" = check ]; then  # figures first (each part bounded), then the CUDA tests
  timeout ${GREEDY_S:-300} python3 -m specviz bench --max-new-tokens 256 --draft distilled --prompts "$PROMPTS_FILE" \
      --per-category 2 --dtype bfloat16 --out "$OUT/check-greedy.json" \
      --methods ${METHODS:-retrieval:16:31,eagle:6:31,eagle:4:15,eagle:4,draft:4@0.5,medusa:4} 2>&1 | quiet | tail -3
  figures "$OUT"/check-greedy.json*
  timeout ${SAMPLED_S:-120} python3 -m specviz bench --max-new-tokens 256 --prompts "$PROMPTS_FILE" --per-category 2 \
      --dtype bfloat16 --temperature 1.0 --seed 0 --out "$OUT/check-sampled.json" \
      --methods "$SAMPLED" 2>&1 | quiet | tail -3
  figures "$OUT"/check-sampled.json*
fi
if [ "$STAGE" = check ] || [ "$STAGE" = tests ]; then
  limit=170; [ "$STAGE" = tests ] && limit=560
  timeout "${TESTS_S:-$limit}" python3 -m pytest -q tests/test_device_loop.py \
      -k "${TESTS:-never_waits or seed_reproduces or sampled_records_with_detail_through}" \
      2>&1 | grep -v "^DEBUG\|^\s*$" | tail -25 | tee "$OUT/pytest.log"
fi
if [ "$STAGE" = greedy ]; then
  bench --prompts "$(part "$PART" "$PARTS")" --dtype bfloat16 --out "$OUT/greedy-$PART.json" --methods "$GREEDY_METHODS" | tail -3
  figures "$OUT/greedy-$PART.json"
fi
if [ "$STAGE" = sampled ]; then
  bench --prompts "$(part "$PART" "$PARTS")" --dtype bfloat16 --temperature 1.0 --seed 0 --out "$OUT/sampled-$PART.json" \
      --methods "$SAMPLED" | tail -3
  figures "$OUT/sampled-$PART.json"
fi
if [ "$STAGE" = fp32 ]; then
  bench --prompts "$(part "$PART" "$PARTS")" --dtype float32 --out "$OUT/fp32-$PART.json" --methods "$GREEDY_METHODS" | tail -3
  figures "$OUT/fp32-$PART.json"
fi
if [ "$STAGE" = exactness ]; then
  check() { timeout "${CHECK_SECONDS:-270}" python3 -m specviz check-exactness --device cuda --dtype float32 --samples ${SAMPLES:-3000} "$@" \
      2>>"$OUT/exactness-$PART.log" | tee -a "$OUT/exactness-$PART.txt"; }
  case "$PART" in
    1) check --method medusa --gamma 3 --top-p 0.9
       check --method retrieval --gamma 8 --tree 15
       check --method ngram --gamma 4 --top-k 50 ;;
    2) check --method eagle --gamma 4 --tree 15 --top-k 20
       check --method eagle --gamma 4 ;;
    *) check --method draft --draft distilled --gamma 4 --draft-stop 0.5 ;;
  esac
fi
if [ "$STAGE" = profile ]; then
  timeout "${PROFILE_S:-400}" python3 -m scripts.graph_profile --out "$OUT/profile.json" \
      ${METHODS:+--methods "$METHODS"} 2>&1 | quiet | grep -v "USDT\|^\s*$" | tee "$OUT/profile.txt"
fi
