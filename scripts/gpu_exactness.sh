#!/usr/bin/env bash
# On the GPU machine, the default model staged (docs/gpu.md): `check-exactness` for every method that drafts,
# on the default target in float32, each method in its own process (the GPU is shared; most of a run's time
# is the host's). SAMPLES runs per method and as many for its control. Results: $OUT/exact-*.txt.
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
source "$(dirname "$0")/gpu_common.sh"
SAMPLES=${SAMPLES:-3000}
check() {
  local name=$1; shift
  timeout "${LIMIT:-540}" python3 -m specviz check-exactness --device cuda --dtype float32 --samples "$SAMPLES" "$@" \
      > "$OUT/exact-$name.txt" 2> "$OUT/exact-$name.err" &
}
check draft --method draft --draft default
check ngram --method ngram
check ngram-tree --method ngram --tree 16
check retrieval --method retrieval
check retrieval-tree --method retrieval --tree 16
check early-exit --method early-exit
check medusa --method medusa
check medusa-tree --method medusa --tree 16
check medusa-top-p --method medusa --top-p 0.9
check eagle --method eagle
check eagle-tree --method eagle --tree 15 --top-k 20
check adaptive --method adaptive
wait
for f in "$OUT"/exact-*.txt; do cat "$f"; grep -h "Error\|error" "${f%.txt}.err" | tail -2; done
