"""specviz web app: `python app.py` serves it (offline default model; GPU when there is one)."""
from specviz.ui.minimal import build_demo

if __name__ == "__main__":
    build_demo().queue(default_concurrency_limit=1).launch()
