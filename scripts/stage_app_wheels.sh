#!/usr/bin/env bash
# The app's wheels for the GPU machine, which reaches no package registry: gradio and plotly at the versions
# requirements.txt pins, and every dependency of theirs that machine lacks, downloaded here for CPython 3.12
# on x86-64 Linux into .gpu/wheels-1/ and .gpu/wheels-2/ (git-ignored), each under 60 MiB so that each
# travels with one call. The GPU machine's own torch, transformers, numpy, safetensors, tokenizers,
# huggingface_hub, tqdm, jinja2, pyyaml and requests are left out (see docs/gpu.md for the install line).
#   bash scripts/stage_app_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
LIMIT=$((60 * 1024 * 1024))
GRADIO=$(grep -E '^gradio==' requirements.txt | cut -d= -f3)
PLOTLY=$(grep -E '^plotly==' requirements.txt | cut -d= -f3)
PRESENT="torch transformers numpy safetensors tokenizers huggingface_hub tqdm jinja2 pyyaml requests"
ALL=.gpu/wheels-all
rm -rf "$ALL" .gpu/wheels-1 .gpu/wheels-2
mkdir -p "$ALL" .gpu/wheels-1 .gpu/wheels-2
$PYTHON -m pip download -q "gradio==$GRADIO" "plotly==$PLOTLY" --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform linux_x86_64 -d "$ALL"
for name in $PRESENT; do  # wheel file names spell a project with underscores, any case
  pattern=$(echo "$name" | tr '-' '_')
  find "$ALL" -maxdepth 1 -iname "${pattern}-*.whl" -delete
done
# largest first, each into the first folder it fits
used1=0; used2=0
while read -r size file; do
  if [ $((used1 + size)) -lt $LIMIT ]; then mv "$file" .gpu/wheels-1/; used1=$((used1 + size))
  elif [ $((used2 + size)) -lt $LIMIT ]; then mv "$file" .gpu/wheels-2/; used2=$((used2 + size))
  else echo "$file does not fit in two folders of 60 MiB" >&2; exit 1
  fi
done < <(find "$ALL" -maxdepth 1 -name '*.whl' -printf '%s %p\n' | sort -rn)
rmdir "$ALL"
git check-ignore -q .gpu/wheels-1 || { echo ".gpu/ is not git-ignored" >&2; exit 1; }
echo "wheels-1: $(ls .gpu/wheels-1 | wc -l) wheels, $((used1 / 1024 / 1024)) MiB; wheels-2: $(ls .gpu/wheels-2 | wc -l)" \
     "wheels, $((used2 / 1024 / 1024)) MiB; total $(((used1 + used2) / 1024 / 1024)) MiB"
echo "on the GPU machine: python3 -m pip install --no-index --find-links .gpu/wheels-1 --find-links .gpu/wheels-2" \
     "gradio==$GRADIO plotly==$PLOTLY"
