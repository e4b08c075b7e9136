# Sourced by the scripts/gpu_*.sh stage scripts: the environment on the GPU machine, $OUT, a filter for
# progress bars and load messages, and the card and versions written to $OUT/gpu.txt. The default model is the
# file staged at /root/specviz-gpu (docs/gpu.md) where it is there (else the package's, as anywhere).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then sed -n '1,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; fi  # run, not sourced
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
STAGED=/root/specviz-gpu/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -z "${SPECVIZ_DEFAULT_GGUF:-}" ] && [ -f "$STAGED" ]; then export SPECVIZ_DEFAULT_GGUF=$STAGED; fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
quiet() { tr "\r" "\n" | grep -v "Converting\|Loading weights\|bench:\|clean_up_tokenization\|/s\]$"; }
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader || echo "no GPU"; } | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
