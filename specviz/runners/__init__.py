"""Runners: one forward of the target (or a drafter) over new positions, with a KV cache that rolls back.
static.StaticRunner is the fast path (llama.py, graphs.py, onednn.py); specviz.runners.causal.CausalRunner runs
transformers' own forward for every other model."""
