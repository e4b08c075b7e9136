"""The figures the app shows of a step, gathered in one read (specviz/display.py)."""
import pytest
import torch

from specviz.display import TOP_N, step_figures

V = 300


def piece_by_piece(p_shown, q_shown, draft_ids, row, next_id, next_distribution):
    """The figures read one at a time, as the engine read them before they were gathered: the reference."""
    def top(probs):
        values, ids = torch.topk(probs, min(TOP_N, probs.shape[-1]), dim=-1)
        return [(i, v) for i, v in zip(ids.tolist(), values.tolist())]

    gamma = len(draft_ids)
    rows, ids = torch.arange(gamma), torch.tensor(draft_ids, dtype=torch.long)
    return {
        "p_of": p_shown[rows, ids].tolist(),
        "q_of": q_shown[rows, ids].tolist() if q_shown is not None else [None] * gamma,
        "p_tops": top(p_shown),
        "q_tops": top(q_shown) if q_shown is not None else [None] * gamma,
        "next_top": top((p_shown[row] if next_distribution is None else next_distribution).unsqueeze(0))[0],
        "p_next": float(p_shown[row, next_id]),
    }


def gathered(p_shown, q_shown, draft_ids, row, next_id, next_distribution):
    figures = step_figures(p_shown, q_shown, draft_ids, row, next_id, next_distribution)
    as_pairs = lambda tops: [(t.ids, t.probs) if t is not None else None for t in tops]  # noqa: E731
    return {
        "p_of": figures.p_of, "q_of": figures.q_of, "p_tops": as_pairs(figures.p_tops),
        "q_tops": as_pairs(figures.q_tops), "next_top": (figures.next_top.ids, figures.next_top.probs),
        "p_next": figures.p_next,
    }


def distributions(rows: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, V, generator=generator).mul(3).softmax(-1)


SCENARIOS = {
    "greedy, draft model (p and q)": (4, True, False),
    "greedy, lookup (no q)": (4, False, False),
    "sampled, draft model": (3, True, True),
    "plain decoding (nothing drafted)": (0, False, False),
}


@pytest.mark.parametrize("gamma, with_q, sampled", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_gathered_figures_equal_the_ones_read_piece_by_piece(gamma, with_q, sampled):
    p_shown = distributions(gamma + 1, 0)
    q_shown = distributions(gamma, 1) if with_q else None
    draft_ids = torch.randint(0, V, (gamma,), generator=torch.Generator().manual_seed(2)).tolist()
    row = min(2, gamma)
    next_distribution = distributions(1, 3)[0] if sampled else None
    args = (p_shown, q_shown, draft_ids, row, 7, next_distribution)
    assert gathered(*args) == piece_by_piece(*args)
    if gamma:  # control: another position for the next token changes what is shown
        assert gathered(p_shown, q_shown, draft_ids, 0, 7, next_distribution) != piece_by_piece(*args)


def test_a_step_is_read_from_the_device_once(monkeypatch):
    reads = []
    original = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or original(self))
    args = (distributions(5, 0), distributions(4, 1), [5, 6, 7, 8], 2, 9, None)
    step_figures(*args)
    assert len(reads) == 1
    reads.clear()
    piece_by_piece(*args)  # control: read piece by piece, the counter sees every read
    assert len(reads) >= 6
