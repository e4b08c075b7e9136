"""Expected values from Leviathan et al. (2023), to show beside what a run measured."""
from __future__ import annotations


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha): tokens per target forward with i.i.d. acceptance alpha."""
    if gamma <= 0:
        return 1.0
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """Theorem 3.8: expected tokens per step / (gamma * c + 1), taking the verify pass as one target step."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * cost_ratio + 1.0)


def best_gamma(alpha: float, cost_ratio: float, gamma_max: int = 32) -> int:
    return max(range(1, gamma_max + 1), key=lambda g: expected_speedup(alpha, g, cost_ratio))
