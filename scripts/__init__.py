"""Tools that a user or maintainer runs from the repository's root: `python -m scripts.NAME --help` (each says
what it does), and the GPU machine's stage scripts, `bash scripts/gpu_*.sh --help`. A package, so that a tool
runs from a plain clone, installed or not, and can import a sibling (`from scripts.gpu_check import ...`)."""
