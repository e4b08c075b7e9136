#!/usr/bin/env bash
# The app's wheels for the GPU machine, which reaches no package registry: gradio and plotly at the versions
# requirements.txt pins, and every dependency of theirs that machine lacks, downloaded here for CPython 3.12
# on x86-64 Linux into .gpu/wheels-1/, .gpu/wheels-2/, ... (git-ignored). A call carries at most 64 MiB,
# the repository's tracked files included, so each folder holds at most LIMIT_MIB (default: 64 MiB less
# the tracked files less 2 MiB) and travels with its own call. The GPU machine's own torch, transformers,
# numpy, safetensors, tokenizers, huggingface_hub, tqdm, jinja2, pyyaml and requests are left out (see
# docs/gpu.md for the install line).
#   bash scripts/stage_app_wheels.sh     (PYTHON=... names the interpreter whose pip downloads)
case "${1:-}" in -h|--help) sed -n '1,/^[^#]/{/^#!/d;/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
TRACKED=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
LIMIT=$(( ${LIMIT_MIB:-$(( 62 - TRACKED / 1024 / 1024 ))} * 1024 * 1024 ))
GRADIO=$(grep -E '^gradio==' requirements.txt | cut -d= -f3)
PLOTLY=$(grep -E '^plotly==' requirements.txt | cut -d= -f3)
PRESENT="torch transformers numpy safetensors tokenizers huggingface_hub tqdm jinja2 pyyaml requests"
ALL=.gpu/wheels-all
rm -rf "$ALL" .gpu/wheels-[0-9]*
mkdir -p "$ALL"
$PYTHON -m pip download -q "gradio==$GRADIO" "plotly==$PLOTLY" --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform linux_x86_64 -d "$ALL" 2> >(grep -v "is ignored: it is neither" >&2)
for name in $PRESENT; do  # wheel file names spell a project with underscores, any case
  pattern=$(echo "$name" | tr '-' '_')
  find "$ALL" -maxdepth 1 -iname "${pattern}-*.whl" -delete
done
# largest first, each into the first folder it fits
used=()
while read -r size file; do
  for ((i = 0; ; i++)); do
    if [ $(( ${used[i]:-0} + size )) -le $LIMIT ]; then
      mkdir -p ".gpu/wheels-$((i + 1))" && mv "$file" ".gpu/wheels-$((i + 1))/"
      used[i]=$(( ${used[i]:-0} + size )); break
    fi
    [ "${used[i]:-0}" = 0 ] && { echo "$file alone is over $((LIMIT / 1024 / 1024)) MiB" >&2; exit 1; }
  done
done < <(find "$ALL" -maxdepth 1 -name '*.whl' -printf '%s %p\n' | sort -rn)
rmdir "$ALL"
git check-ignore -q .gpu/wheels-1 || { echo ".gpu/ is not git-ignored" >&2; exit 1; }
total=0; links=""
for ((i = 0; i < ${#used[@]}; i++)); do
  echo "wheels-$((i + 1)): $(ls ".gpu/wheels-$((i + 1))" | wc -l) wheels, $(( used[i] / 1024 / 1024 )) MiB"
  total=$((total + used[i])); links="$links --find-links .gpu/wheels-$((i + 1))"
done
echo "total $((total / 1024 / 1024)) MiB in ${#used[@]} folders of at most $((LIMIT / 1024 / 1024)) MiB" \
     "(tracked files: $((TRACKED / 1024 / 1024)) MiB a call)"
echo "on the GPU machine: python3 -m pip install --no-index$links gradio==$GRADIO plotly==$PLOTLY"
