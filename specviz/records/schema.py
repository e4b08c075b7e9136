"""The engine-to-UI contract: plain dataclasses, no torch tensors, so that a renderer, a JSON export and a
test can build or read them without a model."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class TokenKind(str, Enum):
    ACCEPTED = "accepted"  # a draft token that the target accepted
    REJECTED = "rejected"  # a draft token that the target rejected (not part of the output)
    RESAMPLED = "resampled"  # drawn by the target in place of the first rejected draft token
    BONUS = "bonus"  # the extra target token when every draft token of the step was accepted
    TARGET = "target"  # a token of plain decoding (or of a step with no draft)


@dataclass
class TopTokens:
    """The most probable tokens of one distribution, most probable first."""

    ids: list[int]
    probs: list[float]
    texts: list[str] = field(default_factory=list)


@dataclass
class TreeNode:
    """One candidate of a step's draft tree, as the verifier saw it."""

    token_id: int
    parent: int  # the index of its parent in the step's tree; -1: the step's last accepted token (the root)
    on_path: bool  # on the accepted path
    tried: bool  # judged by the verifier (below the root or an accepted node, up to the sibling it accepted)
    p: float | None = None  # the target's probability of the token after its parent; None: not read (a lean record)
    q: float | None = None  # the drafter's; None: one-hot (a tree's candidates are verified as one-hot drafts)
    text: str = ""


@dataclass
class DraftPosition:
    """One drafted position of a step and the verifier's decision on it."""

    token_id: int
    text: str
    q: float | None  # drafter's probability of the token; None for a drafter with no distribution (one-hot)
    p: float  # target's probability of the token
    accept_prob: float  # min(1, p / q) when sampling; 1.0 or 0.0 for greedy
    u: float | None  # the uniform draw compared with accept_prob; None for greedy
    accepted: bool
    reached: bool  # False for positions after the first rejection: the verifier never looked at them
    p_top: TopTokens
    q_top: TopTokens | None


@dataclass
class TokenRecord:
    """One shown token, with its kind carried as data from the engine to the renderer."""

    id: int
    text: str
    kind: TokenKind
    step: int
    p: float | None = None
    q: float | None = None
    accept_prob: float | None = None
    u: float | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["kind"] = self.kind.value
        return out


@dataclass
class StepRecord:
    """One draft-verify-accept step (or one plain decoding step when nothing was drafted)."""

    index: int
    gamma: int  # draft tokens proposed this step (0 for a plain step)
    positions: list[DraftPosition]
    n_accepted: int
    next_token: TokenRecord  # the resampled, bonus or target token that ends the step
    next_top: TopTokens  # the distribution next_token was drawn from (the residual after a rejection)
    tokens: list[TokenRecord]  # this step's tokens in display order: accepted, rejected, then next_token
    draft_ms: float
    verify_ms: float
    elapsed_s: float  # seconds since the run started, at the end of this step
    emitted: int  # tokens this step added to the output (after any cut at EOS or max-new-tokens)
    total_emitted: int  # output tokens so far
    tree_size: int = 0  # draft tokens verified in a tree this step (0: a chain); `positions` then shows its
    # accepted path and, below it, the drafter's favourite line
    doubted: bool = False  # the drafter stopped early, after a token it gave less than the draft stop
    tree: list[TreeNode] = field(default_factory=list)  # a tree step's every candidate, in draft order; [] a chain

    @property
    def emitted_tokens(self) -> list[TokenRecord]:
        return [t for t in self.tokens if t.kind != TokenKind.REJECTED][: self.emitted]

    def to_dict(self) -> dict:
        out = asdict(self)
        for token in out["tokens"]:
            token["kind"] = TokenKind(token["kind"]).value
        out["next_token"]["kind"] = self.next_token.kind.value
        return out


@dataclass
class RunMetrics:
    new_tokens: int
    steps: int
    target_forwards: int  # verify passes (the prefill is not counted)
    drafted: int
    accepted: int
    acceptance_rate: float | None  # accepted / drafted; None when nothing was drafted
    mean_accepted_length: float  # tau = new tokens / target forwards
    per_position_acceptance: list[float]  # [i]: share of drafting steps whose first i+1 drafts were all accepted
    wall_seconds: float  # prefill and decoding
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    tokens_per_second: float
    cost_ratio: float | None  # c = time of one drafter token / time of one target forward


@dataclass
class RunResult:
    method: str
    prompt: str
    prompt_tokens: int
    text: str
    token_ids: list[int]  # the output (no prompt)
    tokens: list[TokenRecord]  # every shown token, rejected ones included, in order
    steps: list[StepRecord]
    metrics: RunMetrics
    settings: dict
    stop_reason: str  # "eos" or "max_new_tokens"

    def to_dict(self, include_steps: bool = True) -> dict:
        out = {
            "method": self.method,
            "prompt": self.prompt,
            "prompt_tokens": self.prompt_tokens,
            "text": self.text,
            "token_ids": self.token_ids,
            "tokens": [{"id": t.id, "text": t.text, "kind": t.kind.value, "step": t.step} for t in self.tokens],
            "metrics": asdict(self.metrics),
            "settings": self.settings,
            "stop_reason": self.stop_reason,
        }
        if include_steps:
            out["steps"] = [s.to_dict() for s in self.steps]
        return out
