# Sourced by the scripts/gpu_*.sh stage scripts: the environment on the GPU machine, $OUT, a filter for
# progress bars and load messages, and the card and versions written to $OUT/gpu.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export SPECVIZ_DEFAULT_GGUF=${SPECVIZ_DEFAULT_GGUF:-/root/specviz-gpu/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
quiet() { tr "\r" "\n" | grep -v "Converting\|Loading weights\|bench:\|clean_up_tokenization\|/s\]$"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
