"""`dflash`: block drafting (DFlash, Chen, Liang and Liu 2026). One forward of a small drafter predicts every
position of a block at once, from the target's hidden states of the context (several of its layers, dflash_net.py)
and the block's first token, the last accepted one. A step drafts up to gamma of the block's positions (at most the
block's size less one) as a chain, each drawn from its own distribution q; with a tree budget (`--tree N`) it
drafts DDTree's tree instead (arXiv 2604.12989): the N best paths through each position's likeliest tokens,
verified in one pass (rule/tree_device.factored_tree).

Drafting costs one forward whatever gamma, where EAGLE and a draft model pay one a token. The drafter's cache
holds the context's keys and values, one position for each token the target has read (the prompt, then the
positions each verify pass kept, with the features the target computed for them there); drafting on the device
loop is dflash_device.py's, with the same functions.
"""
from __future__ import annotations

import torch

from ..options import EngineOptions
from .base import Draft, Feedback, Proposer, ProposerRequest
from .checkpoints import load_drafter
from .dflash_net import DFlashDrafter, block_tree, draft_block, feed_context


class DFlashProposer(Proposer):
    name = "dflash"
    needs_target_hidden = True

    def __init__(self, drafter: DFlashDrafter, options: EngineOptions | None = None):
        self.drafter = drafter
        self.options = options or EngineOptions.from_environment()
        self.target_layers = drafter.target_layers  # what the run's target runner hands over as hidden states
        self.cache = None
        self.fed = 0  # context positions whose keys and values are in the cache

    @property
    def most_drafts(self) -> int:
        """Draft tokens one block holds: its positions after the first."""
        return self.drafter.config.block_size - 1

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        capacity = prompt_ids.shape[0] + settings.max_new_tokens + self.drafter.config.block_size + 1
        self.cache, self.fed = self.drafter.new_cache(capacity), 0
        if target_hidden is not None:
            self._feed(target_hidden)

    @torch.inference_mode()
    def _feed(self, features: torch.Tensor) -> None:
        count = features.shape[0]
        if count:
            slots = torch.arange(self.fed, self.fed + count, device=self.drafter.device)
            feed_context(self.drafter, self.cache, features.to(self.drafter.device), slots)
            self.fed += count

    @torch.inference_mode()
    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        length, drafter = tokens.shape[0], self.drafter
        if self.fed != length - 1:  # the target has not handed over the features of every position before the last
            return self.empty_draft(tokens.device)
        gamma = min(gamma, self.most_drafts)
        start = torch.full((1,), length - 1, dtype=torch.long, device=drafter.device)
        hidden = draft_block(drafter, self.cache, tokens[-1:].to(drafter.device), start,
                             length - 1 + drafter.config.block_size)[1:gamma + 1]
        if self.tree_budget():
            ids, parents = block_tree(drafter, hidden, self.tree_budget()).tolist()
            return Draft(torch.tensor(ids, dtype=torch.long), None, None, parents)  # on the host, where it is read
        logits = drafter.head.full_logits(hidden)  # [gamma, V]
        drafted, probs = zip(*(self.choose(row) for row in logits))  # each position drawn from its own q
        device = tokens.device
        return Draft(torch.tensor(drafted, dtype=torch.long, device=device), torch.stack(probs).to(device),
                     logits.to(device))

    def observe(self, feedback: Feedback) -> None:
        new = feedback.tokens.shape[0] - 1 - self.fed
        if new > 0 and feedback.target_hidden is not None:
            self._feed(feedback.target_hidden[:new])

    def device_lookup(self, settings, runner):
        """Its blocks on the device (dflash_device.py), where the drafter sits beside the target."""
        if self.drafter.device != runner.device or self.drafter.dtype != runner.dtype:
            return None
        from .dflash_device import DFlashLookup

        return DFlashLookup(self.drafter, settings.gamma, settings.tree,
                            compiled=runner.use_graphs and runner.use_compile)

    def release(self) -> None:
        self.cache = None


def build(request: ProposerRequest) -> DFlashProposer:
    """`dflash`'s proposer (specviz.methods): the block drafter of --heads, or the one shipped for the target."""
    return DFlashProposer(load_drafter("dflash", request.target, request.heads, request.options), request.options)
