"""The speculative step, for one sequence (a Row): draft, verify, keep, observe.

    gamma = row.draft_length(settings, context)                    # 1. draft: up to gamma tokens
    draft = proposer.propose(tokens, gamma)
    logits = target([last accepted token, *draft])                 # 2. verify: one forward, gamma + 1 positions
    verdict = judge(draft, logits, settings, generator)            #    accept a prefix, draw the next token
    kept = row.keep(draft[:verdict.n_accepted] + [next token])     # 3. keep: up to the token limit or an EOS
    proposer.observe(feedback(...))                                # 4. observe: the drafter catches up

The host loop (engine.SpeculativeRun._host_step) runs it for its one row, a draft tree's verification
included (verify_tree); the batch loop (batch.decode_batch) runs one forward for every row and then judges,
keeps and observes each row exactly so: a row of a batch is a run of one (vLLM's rejection sampler verifies a
batch row by row the same way). What a step shows (its StepRecord) is step_records.py's."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..rule import tree as trees
from ..rule import verify as verification
from ..proposers import Draft, Feedback, Proposer
from ..rule.sampling import warp_probs
from ..settings import DecodeSettings
from .step_records import tree_nodes


@dataclass
class Row:
    """One sequence being decoded: its accepted tokens (prompt and output) on the host, its output, and what
    ends it (the token limit, an end-of-sequence token)."""

    sequence: list[int]
    max_new_tokens: int
    eos_ids: set
    generator: torch.Generator
    output: list[int] = field(default_factory=list)
    stop_reason: str = "max_new_tokens"

    def draft_length(self, settings: DecodeSettings, context: int) -> int:
        """Drafts this step may verify: gamma, fewer near the token limit or the model's context (the verify
        pass writes the last accepted token and every draft into the cache)."""
        room = min(self.max_new_tokens - len(self.output) - 1, context - len(self.sequence) - 1)
        return max(0, min(settings.gamma, room))

    def keep(self, new_ids: list[int]) -> list[int]:
        """Appends what a step keeps of its accepted drafts and next token to the output and the sequence: up to
        max_new_tokens in all, and up to an end-of-sequence token. Returns what it kept."""
        kept = []
        for token_id in new_ids:
            if len(self.output) >= self.max_new_tokens:
                break
            kept.append(token_id)
            self.output.append(token_id)
            if token_id in self.eos_ids:
                self.stop_reason = "eos"
                break
        self.sequence.extend(kept)
        return kept

    @property
    def finished(self) -> bool:
        return self.stop_reason == "eos" or len(self.output) >= self.max_new_tokens


def propose(proposer: Proposer, tokens: torch.Tensor, gamma: int, tree: int, room: int, device) -> Draft:
    """The proposer's draft of up to gamma tokens (none when gamma is 0); a tree checked against gamma and its
    budget, and cut to the `room` left in the cache (its first nodes are a tree too)."""
    draft = proposer.propose(tokens, gamma) if gamma > 0 else proposer.empty_draft(device)
    if draft.parents is None:
        assert draft.size <= gamma, f"{proposer.name} proposed {draft.size} tokens, more than gamma={gamma}"
        return draft
    assert max(trees.depths(draft.parents), default=0) <= gamma and draft.size <= max(tree, gamma), \
        f"{proposer.name} proposed a tree deeper than gamma={gamma} or larger than tree={tree}"
    if draft.size > room:
        draft = Draft(draft.token_ids[:room], None, None, draft.parents[:room])
    return draft


def judge(draft: Draft, draft_ids: list[int], logits: torch.Tensor, settings: DecodeSettings,
          generator: torch.Generator, verify_sampled=verification.verify_sampled, choices: list[int] | None = None
          ) -> verification.Verdict:
    """The verdict on a chain, from the target's logits [g + 1, V] at the last accepted token and after each
    draft. Greedy: from the target's choices, its argmaxes read to the host (a batch reads every row's in one
    transfer and passes them); sampled: speculative sampling against the drafter's q (verify_sampled, which
    tests replace with a wrong verifier to show that the checks catch it)."""
    if settings.greedy:
        return verification.greedy_verdict(draft_ids, logits.argmax(-1).tolist() if choices is None else choices)
    return verify_sampled(draft.token_ids.to(logits.device), draft.probs, warp_probs(logits, settings), generator)


def feedback(tokens: torch.Tensor, draft: Draft, verdict: verification.Verdict, kept: list[int],
             draft_seconds: float, verify_seconds: float, target_hidden: torch.Tensor | None = None) -> Feedback:
    """What the proposer is told after the step (its observe())."""
    return Feedback(tokens=tokens, drafted=draft.size, n_accepted=verdict.n_accepted, draft_seconds=draft_seconds,
                    verify_seconds=verify_seconds, target_hidden=target_hidden, new_ids=kept)


@dataclass
class Verified:
    """A host step's verification: the drafted line shown (a chain's draft; a tree's accepted path, then the
    drafter's favourite line below where it stopped), its ids, the target's logits before each of its tokens
    and after the last [g + 1, V] and its hidden states at the positions kept (the last accepted token and the
    accepted drafts), the verdict along the line, and the tree's size (0: a chain). logits and hidden are None
    where nobody reads them."""

    shown: Draft
    shown_ids: list[int]
    logits: torch.Tensor | None
    hidden: torch.Tensor | None
    verdict: verification.Verdict
    tree_size: int = 0
    nodes: list = field(default_factory=list)  # a tree's candidates (records.TreeNode); [] for a chain


def verify(runner, draft: Draft, draft_ids: list[int], last_token: int, settings: DecodeSettings,
           generator: torch.Generator, verify_sampled=verification.verify_sampled, keep_rows: bool = True) -> Verified:
    """Verify a step's draft in one forward and keep only what was accepted in the runner's cache. keep_rows:
    whether logits and hidden states are wanted (the records' figures, a drafter that reads the target's
    hidden states)."""
    if draft.parents is not None and not trees.is_chain(draft.parents):
        return verify_tree(runner, draft, draft_ids, last_token, settings, generator, keep_rows)
    cached = runner.length
    # the last accepted token and the drafts, built on the host: one copy to the device
    logits, hidden = runner.forward(torch.tensor([last_token, *draft_ids], dtype=torch.long))  # [g + 1, V]
    verdict = judge(draft, draft_ids, logits, settings, generator, verify_sampled)
    runner.rollback(cached + 1 + verdict.n_accepted)  # keep the fed token and the accepted drafts
    return Verified(draft, draft_ids, logits, hidden[: verdict.n_accepted + 1], verdict)


def verify_tree(runner, draft: Draft, node_ids: list[int], last_token: int, settings: DecodeSettings,
                generator: torch.Generator, keep_rows: bool = True) -> Verified:
    """verify() for a draft tree: one forward over the tree, walked greedily or by sampling (tree.py), the
    accepted path's keys and values kept; what it returns is seen along the line shown."""
    parents, cached = draft.parents, runner.length
    logits, hidden = runner.forward([last_token, *node_ids], parents=parents)
    if settings.greedy:
        choices = logits.argmax(-1).tolist()
        walk = trees.walk_greedy(node_ids, parents, choices)
    else:
        probs = warp_probs(logits, settings)
        walk = trees.walk_sampled(node_ids, parents, probs, generator)
    path = walk.path
    runner.keep_nodes(cached + 1, [cached + 1 + node for node in path])
    line = path + trees.first_child_chain(parents, path[-1] if path else -1)
    rows = [0] + [node + 1 for node in line]  # row i scores line[i] (its parent's row); the last, after it
    tried = {node: (accept, u) for node, accept, u in walk.tried}
    accept_probs, uniforms = [], []
    for node, row in zip(line, rows):
        if node in tried:
            accept, u = tried[node]
        else:  # below where the walk stopped: never looked at; shown as the verifier would have judged it
            accept = float(choices[row] == node_ids[node]) if settings.greedy else float(probs[row, node_ids[node]])
            u = None
        accept_probs.append(accept)
        uniforms.append(u if u is not None else float("nan"))
    verdict = verification.Verdict(
        n_accepted=len(path), next_token=walk.next_token, accept_probs=accept_probs,
        uniforms=None if settings.greedy else uniforms, next_distribution=walk.next_distribution)
    line_ids = [node_ids[node] for node in line]
    shown = Draft(torch.tensor(line_ids, dtype=torch.long), None)  # on the host, where it is read
    judged = {node for node, _, _ in walk.tried}
    if not keep_rows:  # no gathers on the device
        return Verified(shown, line_ids, None, None, verdict, len(node_ids),
                        tree_nodes(node_ids, parents, path, judged))
    nodes = tree_nodes(node_ids, parents, path, judged, node_probs(logits, node_ids, parents, settings,
                                                                    None if settings.greedy else probs))
    # the logits' rows, then the hidden states' (the root and the path): one copy to the device
    picks = torch.tensor(rows + [0] + [node + 1 for node in path], dtype=torch.long).to(logits.device)
    return Verified(shown, line_ids, logits[picks[:len(rows)]], hidden[picks[len(rows):]], verdict, len(node_ids),
                    nodes)


def node_probs(logits: torch.Tensor, node_ids: list[int], parents: list[int], settings: DecodeSettings,
               probs: torch.Tensor | None = None) -> list[float]:
    """The target's p of each tree node after its parent (row parent + 1): the warped distribution when
    sampling (probs, already made), the plain softmax for greedy as the positions show it. Only the rows' log
    normaliser is computed, never a [N + 1, V] softmax."""
    rows = torch.tensor([parent + 1 for parent in parents], dtype=torch.long, device=logits.device)
    tokens = torch.tensor(node_ids, dtype=torch.long, device=logits.device)
    if probs is not None:
        return probs[rows, tokens].float().tolist()
    scores = logits.float()
    return (scores[rows, tokens] - torch.logsumexp(scores, dim=-1)[rows]).exp().tolist()
