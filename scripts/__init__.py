"""Tools that a user or maintainer runs from the repository's root: `python -m scripts.NAME --help` (each says
what it does), the GPU machine's suites among them (`python -m scripts.gpu_suite --list`). A package, so that a tool
runs from a plain clone, installed or not, and can import a sibling (`from scripts.gpu_check import ...`)."""
