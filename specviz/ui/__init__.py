"""The only place that imports gradio and plotly: turns the engine's step records into widget values."""
