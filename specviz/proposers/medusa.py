"""`medusa`: extra decoding heads on the target's last hidden state (Medusa, Cai et al. 2024). Head k (k = 0,
1, ...) is a few residual blocks x + SiLU(W x + b) followed by an output layer, and predicts the token k + 2
places after the hidden state's position (the target's own output layer predicts the next one). All heads
read one hidden state, so a whole draft costs one small batched pass; the heads never see each other's
tokens, which is why their acceptance falls faster along the draft than a feature drafter's.

The hidden state used is the target's at the position before the last token: the target produced the last
token from it, so head 0 guesses the token after that one, the first draft token.
"""
from __future__ import annotations

import torch

from ..rule.sampling import draw, warp_probs
from ..rule.tree import product_tree
from .base import Draft, Feedback, Proposer, ProposerRequest
from .checkpoints import load_drafter
from .medusa_net import MedusaDrafter

# Candidates per head in a draft tree: up to this many, never more than the tree has nodes. Wide matters:
# in a replay of Spec-Bench prompts (scripts/medusa_sim.py) a tree's tau keeps rising as each head offers more
# of its likeliest tokens, from 10 to 20 to 100 (the heads' own ranking is a weak guide on unseen text).
TREE_TOP_K = 100


class MedusaProposer(Proposer):
    name = "medusa"
    needs_target_hidden = True

    def __init__(self, drafter: MedusaDrafter):
        self.drafter = drafter

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        has_hidden = target_hidden is not None and target_hidden.shape[0] > 0
        self.last_hidden = target_hidden[-1] if has_hidden else None  # feature of position `known - 1`
        self.known = target_hidden.shape[0] if has_hidden else 0

    @torch.inference_mode()
    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        if self.last_hidden is None or self.known != tokens.shape[0] - 1:
            return self.empty_draft(tokens.device)
        count = min(gamma, self.drafter.heads.num_heads)
        weight = self.drafter.outputs[0].weight
        hidden = self.last_hidden.to(weight.device, weight.dtype)
        budget = self.tree_budget()
        if budget:  # the best paths through each head's top candidates (Medusa's tree, chosen per step)
            ids, values = self.drafter.top_tokens(hidden, count, min(TREE_TOP_K, budget))
            node_ids, parents = product_tree(list(zip(ids.tolist(), values.tolist())), budget)
            # on the host, as ngram's: the engine reads tree ids there (no copy to the device and back)
            return Draft(torch.tensor(node_ids, dtype=torch.long), None, None, parents)
        logits = self.drafter.logits(hidden, count)  # [count, V]
        probs = warp_probs(logits, self.settings)  # q: each head's distribution, independent of the others
        if self.settings.greedy:
            token_ids = logits.argmax(-1)
        else:
            token_ids = draw(probs, self.generator)
        device = tokens.device
        return Draft(token_ids.to(device), probs.to(device), logits.to(device))

    def device_lookup(self, settings, runner):
        """Its chains and trees on the device (medusa_device.py), where the heads sit beside the target."""
        weight = self.drafter.outputs[0].weight
        if weight.device != runner.device or weight.dtype != runner.dtype:
            return None
        if len({out.scored for out in self.drafter.outputs}) > 1:
            return None
        from .medusa_device import MedusaLookup

        return MedusaLookup(self.drafter, settings.gamma, compiled=runner.use_graphs and runner.use_compile,
                            tree=settings.tree, top_k=min(TREE_TOP_K, settings.tree))

    def observe(self, feedback: Feedback) -> None:
        new = feedback.tokens.shape[0] - 1 - self.known
        if new > 0 and feedback.target_hidden is not None:
            self.last_hidden = feedback.target_hidden[new - 1]
            self.known += new


def build(request: ProposerRequest) -> MedusaProposer:
    """`medusa`'s proposer (specviz.methods): the heads of --heads, or those shipped for the target."""
    return MedusaProposer(load_drafter("medusa", request.target, request.heads, request.options))
