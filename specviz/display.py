"""What the app shows of one step's distributions: p and q of each drafted token, the most probable tokens of
every position, and p of the token the target chose. All of it is gathered on the device and read with one
copy: on a GPU each read waits for the device, and a step read piece by piece (nine reads) cost the app a third
of its speed."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .records import TopTokens

TOP_N = 20  # tokens of p and q kept per position for the inspector


@dataclass
class StepFigures:
    p_of: list[float]  # p(x_i) of each drafted token x_i
    q_of: list[float | None]  # q(x_i), None where the drafter gives no distribution
    p_tops: list[TopTokens]  # the target's most probable tokens at each of the g + 1 positions
    q_tops: list[TopTokens | None]  # the drafter's at each of the g drafted positions
    next_top: TopTokens  # the distribution the next token was drawn from (greedy: p at that position)
    p_next: float  # p of the target's token at that position


def step_figures(p_shown: torch.Tensor, q_shown: torch.Tensor | None, draft_ids: list[int], row: int,
                 next_id: int, next_distribution: torch.Tensor | None = None, n: int = TOP_N) -> StepFigures:
    """p_shown [g + 1, V] the target's shown distributions; q_shown [g, V] the drafter's or None; row the position
    the next token was chosen at; next_distribution [V] what it was drawn from when sampling (None: p_shown[row])."""
    gamma, device = len(draft_ids), p_shown.device
    k = min(n, p_shown.shape[-1])
    ids = torch.tensor(draft_ids, dtype=torch.long).to(device, non_blocking=True)
    rows = torch.arange(gamma, device=device)
    parts = [p_shown[rows, ids], *torch.topk(p_shown, k, dim=-1)]
    if q_shown is not None:
        parts += [q_shown[rows, ids], *torch.topk(q_shown, k, dim=-1)]
    if next_distribution is not None:
        parts += list(torch.topk(next_distribution.unsqueeze(0), k, dim=-1))
    parts.append(p_shown[row, next_id].reshape(1))
    # float64 holds every token id exactly; one copy to the host for all of it
    flat = torch.cat([part.reshape(-1).to(torch.float64) for part in parts]).tolist()
    sizes = [part.numel() for part in parts]
    pieces, start = [], 0
    for size in sizes:
        pieces.append(flat[start:start + size])
        start += size

    def tops(values: list[float], top_ids: list[float], count: int) -> list[TopTokens]:
        return [TopTokens(ids=[int(i) for i in top_ids[r * k:(r + 1) * k]], probs=values[r * k:(r + 1) * k])
                for r in range(count)]

    p_of, p_values, p_ids = pieces[0], pieces[1], pieces[2]
    p_tops = tops(p_values, p_ids, gamma + 1)
    rest = pieces[3:]
    q_of, q_tops = [None] * gamma, [None] * gamma
    if q_shown is not None:
        q_of, q_tops, rest = rest[0], tops(rest[1], rest[2], gamma), rest[3:]
    next_top = (tops(rest[0], rest[1], 1)[0] if next_distribution is not None
                else TopTokens(ids=list(p_tops[row].ids), probs=list(p_tops[row].probs)))
    return StepFigures(p_of=p_of, q_of=q_of, p_tops=p_tops, q_tops=q_tops, next_top=next_top, p_next=rest[-1][0])
