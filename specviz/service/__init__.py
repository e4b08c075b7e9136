"""The run service: what a run, a comparison, a measurement or a lesson computes, as typed events (events.py),
headless, for the web layer, the endpoints and the GPU worker that relays them (no gradio here)."""
