"""The rule: pure tensor functions that decide tokens (warping and seeded draws, verification, draft trees) and
the expected values they imply. No models, no clocks: what the engine and the lessons apply."""
