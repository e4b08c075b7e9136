"""specviz web app: `python app.py` serves it (offline default model; GPU when there is one; models load on
the first run, not at import). Everything else lives in specviz/ui/."""
from specviz.ui import launch

if __name__ == "__main__":
    launch()
