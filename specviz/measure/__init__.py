"""Measurements: the bench (one prompt set, every method beside plain decoding), batch sizes, the target's cost
curve, the exactness check, the weight-read floor, energy, and whether a figure is plausible."""
