"""What the app shows of a device loop's step (its display detail): the target's top tokens at every position of
the verify pass and its probability of each drafted token (a chain's model drafter's too; a sampled step's, also
where its next token was drawn from), computed on the device as one float32 row (step_detail) and read back on
the host with the step's log (detail_of), so that the host builds the app's records one step behind, as the host
loop's records hold them. The device loop (device_loop.py) runs step_detail in a graph of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..records.schema import TopTokens


def top_figures(probs: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor, top: int) -> torch.Tensor:
    """probs [R, V] -> one float32 row: the `top` most probable tokens at each row (probabilities [R, top], then
    their ids [R, top], exact as floats below 2^24), then each token's probability at its row (tokens, rows [N])."""
    values, ids = probs.topk(top, dim=-1)
    drafted = probs.index_select(0, rows).gather(1, tokens[:, None])[:, 0]
    return torch.cat([values.flatten(), ids.float().flatten(), drafted])


def step_detail(p: torch.Tensor, tokens: torch.Tensor, parent_rows: torch.Tensor, top: int,
                q: torch.Tensor | None = None, drawn: tuple | None = None) -> torch.Tensor:
    """What the app shows of a verify pass, as one float32 row: the target's distributions' (p [W, V]: the softmax
    of its logits, or what a sampled step warped them to) top_figures at each position, with each drafted token's
    probability at its parent's row (tokens, parent_rows [W - 1]); with q [G, V], a chain's drafter's distribution
    at each draft, its top_figures after them; with drawn (a sampled step's: the distribution its next token was
    drawn from [V], the row it was drawn at [1], the token [1]), that distribution's top tokens, then p of the
    token at its row."""
    row = [top_figures(p, tokens, parent_rows, top)]
    if q is not None:
        gamma = q.shape[0]
        row.append(top_figures(q, tokens[:gamma], torch.arange(gamma, device=q.device), top))
    if drawn is not None:
        distribution, at, token = drawn
        none = token[:0]
        row.append(top_figures(distribution[None], none, none, top))
        row.append(p.index_select(0, at).gather(1, token[:, None])[:, 0])
    return torch.cat(row)


def read_detail(values: list[float], rows: int, top: int, drafted: int
                ) -> tuple[list[list[float]], list[list[int]], list[float]]:
    """A top_figures row back on the host: (top probabilities [rows][top], top ids [rows][top], the tokens'
    probabilities [drafted])."""
    size = rows * top
    probs = [values[row * top:(row + 1) * top] for row in range(rows)]
    ids = [[int(i) for i in values[size + row * top:size + (row + 1) * top]] for row in range(rows)]
    return probs, ids, values[2 * size:2 * size + drafted]


@dataclass
class StepDetail:
    """The target's figures of a step along the drafts shown, as the host loop's records hold them."""
    p_drafts: list[float]  # the target's probability of each draft token
    tops: list[TopTokens]  # the target's most probable tokens before each draft token and after the last
    q_drafts: list[float] | None = None  # a model drafter's (chains): its probability of each draft token
    q_tops: list[TopTokens] | None = None  # and its most probable tokens at each
    next_top: TopTokens | None = None  # sampled: the most probable tokens of what the next token was drawn from
    next_p: float | None = None  # sampled: the target's (warped) probability of the next token


def detail_of(values: list[float], line, top: int, width: int, gamma: int, chain_q: bool, sampled: bool
              ) -> StepDetail:
    """A step_detail row read back along the line shown (a chain's drafts; a tree's nodes). top: the top tokens
    a position; width: the verify pass's positions; chain_q: a chain's drafter's figures (gamma rows) follow the
    target's; sampled: then what the next token was drawn from, and p of it."""
    probs, ids, drafted = read_detail(values, width, top, width - 1)
    rows = [0] + [node + 1 for node in line]  # the rows before each token shown, and after the last
    detail = StepDetail(p_drafts=[drafted[node] for node in line],
                        tops=[TopTokens(ids=ids[r], probs=probs[r]) for r in rows])
    rest = values[width * (2 * top + 1) - 1:]
    if chain_q:  # a chain's drafter's figures after the target's
        probs, ids, drafted = read_detail(rest, gamma, top, gamma)
        detail.q_drafts = [drafted[i] for i in line]
        detail.q_tops = [TopTokens(ids=ids[i], probs=probs[i]) for i in line]
        rest = rest[gamma * (2 * top + 1):]
    if sampled:  # where the next token was drawn from, and p of it
        probs, ids, _ = read_detail(rest, 1, top, 0)
        detail.next_top, detail.next_p = TopTokens(ids=ids[0], probs=probs[0]), rest[2 * top]
    return detail
