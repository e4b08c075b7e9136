"""A step's record (records.StepRecord) from what the step decided: one loop over the drafted positions, with
the step's figures (the app's records: probabilities, top tokens, token texts) or without them (the bench's:
ids, kinds, decisions and timings; probabilities NaN, no texts, no top lists). The figures come from the
target's logits on the host loop (figures_from_logits) or from the device loop's step detail (figures_from_device)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..records.schema import DraftPosition, StepRecord, TokenKind, TokenRecord, TopTokens, TreeNode
from ..rule.sampling import display_probs
from ..settings import DecodeSettings
from ..rule.verify import Verdict

TOP_N = 20  # tokens of p and q kept per position for the inspector


@dataclass
class StepFigures:
    """What a detailed record shows of a step's distributions."""
    p_of: list[float]  # the target's probability of each draft token
    q_of: list  # the drafter's (None for a lookup)
    p_tops: list[TopTokens]  # the target's top tokens before each draft token (and after the last)
    q_tops: list  # the drafter's (None for a lookup)
    next_top: TopTokens  # where the next token is drawn from
    next_p: float  # the target's probability of the next token


@dataclass
class StepTiming:
    draft_ms: float
    verify_ms: float
    elapsed_s: float  # since the run started, at the end of the step
    total_emitted: int  # output tokens so far


def accepted_in_output(n_verified: int, kept: list[int]) -> tuple[int, bool]:
    """(drafts the output kept, whether the step was cut). A step is cut when an end-of-sequence token or the
    token limit ends the output inside its accepted drafts: drafts the target accepted after the cut are not
    part of the output, so they do not count as accepted (alpha, tau and the per-position curve agree)."""
    cut = len(kept) <= n_verified
    return (len(kept) if cut else n_verified), cut


def position_state(i: int, n: int, cut: bool, uniforms: list[float] | None) -> tuple[bool, bool, float | None, bool]:
    """Draft position i of a step whose output kept n drafts -> (accepted, reached by the verifier as the output
    sees it, the draw u compared there or None, shown in the token view: a cut step shows nothing past its cut)."""
    accepted = i < n
    reached = accepted or (i == n and not cut)
    u = uniforms[i] if uniforms is not None and reached else None
    return accepted, reached, u, accepted or not cut


def step_record(index: int, draft_ids: list[int], verdict: Verdict, kept: list[int], timing: StepTiming,
                figures: StepFigures | None = None, detokenizer=None) -> StepRecord:
    """The record of a step that drafted draft_ids, was judged `verdict` and kept `kept` in the output. With
    figures (and the run's detokenizer, which the accepted tokens advance) a detailed record, else a lean one."""
    gamma = len(draft_ids)
    n, cut = accepted_in_output(verdict.n_accepted, kept)
    positions, tokens = [], []
    for i, token_id in enumerate(draft_ids):
        accepted, reached, u, shown = position_state(i, n, cut, verdict.uniforms)
        kind = TokenKind.ACCEPTED if accepted else TokenKind.REJECTED
        if figures is None:
            positions.append(DraftPosition(token_id=token_id, text="", q=None, p=float("nan"),
                                           accept_prob=verdict.accept_probs[i], u=u, accepted=accepted,
                                           reached=reached, p_top=TopTokens(ids=[], probs=[]), q_top=None))
            token = TokenRecord(id=token_id, text="", kind=kind, step=index)
        else:
            text = detokenizer.push(token_id) if accepted else detokenizer.peek(token_id)
            p, q = figures.p_of[i], figures.q_of[i]
            positions.append(DraftPosition(token_id=token_id, text=text, q=q, p=p, accept_prob=verdict.accept_probs[i],
                                           u=u, accepted=accepted, reached=reached, p_top=figures.p_tops[i],
                                           q_top=figures.q_tops[i]))
            token = TokenRecord(id=token_id, text=text, kind=kind, step=index, p=p, q=q,
                                accept_prob=verdict.accept_probs[i], u=u)
        if shown:
            tokens.append(token)
    kind = TokenKind.TARGET if gamma == 0 else TokenKind.BONUS if verdict.n_accepted == gamma else TokenKind.RESAMPLED
    next_token = TokenRecord(id=verdict.next_token, text="", kind=kind, step=index,
                             p=None if figures is None else figures.next_p)
    if not cut:
        if figures is not None:
            next_token.text = detokenizer.push(verdict.next_token)
        tokens.append(next_token)
    return StepRecord(
        index=index, gamma=gamma, positions=positions, n_accepted=n, next_token=next_token,
        next_top=TopTokens(ids=[], probs=[]) if figures is None else figures.next_top, tokens=tokens,
        draft_ms=timing.draft_ms, verify_ms=timing.verify_ms, elapsed_s=timing.elapsed_s, emitted=len(kept),
        total_emitted=timing.total_emitted,
    )


def top_tokens(probs: torch.Tensor, n: int = TOP_N) -> list[TopTokens]:
    """probs [N, V] -> the n most probable tokens of each row."""
    values, ids = torch.topk(probs, min(n, probs.shape[-1]), dim=-1)
    return [TopTokens(ids=i, probs=v) for i, v in zip(ids.tolist(), values.tolist())]


def figures_from_logits(draft_probs, draft_logits, draft_ids: list[int], logits: torch.Tensor, verdict: Verdict,
                        settings: DecodeSettings, n: int) -> StepFigures:
    """A host step's figures: logits [g + 1, V] the target's before each draft token and after the last;
    draft_probs (q) and draft_logits [g, V] the drafter's, None for a lookup; n drafts accepted in the output.
    Greedy steps draw from a one-hot: they show the softmax instead."""
    gamma = len(draft_ids)
    p_shown = display_probs(logits, settings)  # [g + 1, V]
    q_shown = None
    if draft_probs is not None:
        q_shown = display_probs(draft_logits, settings) if settings.greedy and draft_logits is not None else draft_probs

    def of_draft(probs: torch.Tensor) -> list[float]:  # probs[i, x_i] for each draft token
        rows = torch.arange(gamma, device=probs.device)
        return probs[rows, torch.tensor(draft_ids, dtype=torch.long, device=probs.device)].tolist()

    next_top = top_tokens((p_shown[n] if settings.greedy else verdict.next_distribution).unsqueeze(0))[0]
    return StepFigures(p_of=of_draft(p_shown) if gamma else [],
                       q_of=of_draft(q_shown) if gamma and q_shown is not None else [None] * gamma,
                       p_tops=top_tokens(p_shown), q_tops=top_tokens(q_shown) if q_shown is not None
                       else [None] * gamma,
                       next_top=next_top, next_p=float(p_shown[n, verdict.next_token]))


def figures_from_device(detail, n: int) -> StepFigures:
    """A step's figures from the device loop's StepDetail (device_detail.py), n drafts accepted in the output: the
    drafter's where it has them (a model's chain), else None, as for a lookup on the host. A sampled step's detail
    has where its next token was drawn from; a greedy step's next token is the target's argmax, so its
    probability is the top one at row n."""
    tops, gamma = detail.tops, len(detail.p_drafts)
    sampled = detail.next_top is not None
    return StepFigures(p_of=detail.p_drafts, q_of=detail.q_drafts or [None] * gamma, p_tops=tops,
                       q_tops=detail.q_tops or [None] * gamma, next_top=detail.next_top if sampled else tops[n],
                       next_p=detail.next_p if sampled else tops[n].probs[0])


def tree_nodes(node_ids: list[int], parents: list[int], path: list[int], tried: set[int],
               p_of: list[float] | None = None) -> list[TreeNode]:
    """A tree step's every candidate (node i: node_ids[i] under parents[i]) with whether it is on the accepted
    path and was judged, and the target's p of it where read (p_of, by node; None: a lean record)."""
    on_path = set(path)
    return [TreeNode(token_id=int(token), parent=int(parent), on_path=i in on_path, tried=i in tried,
                     p=None if p_of is None else float(p_of[i]))
            for i, (token, parent) in enumerate(zip(node_ids, parents))]


def name_tree_nodes(nodes: list[TreeNode], decode) -> list[TreeNode]:
    """The nodes with each token's text (decode: a token id -> its text), for a detailed record."""
    for node in nodes:
        node.text = decode(node.token_id)
    return nodes
