"""The web app: the only part of specviz that imports gradio and plotly."""
from .app import build_demo, launch

__all__ = ["build_demo", "launch"]
