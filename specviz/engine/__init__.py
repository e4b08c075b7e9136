"""The engine: a run (prefill, steps, result), the speculative step, its records, the device loop, and batches."""
