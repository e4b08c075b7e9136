"""`eagle`: a feature-level drafter (EAGLE, Li et al. 2024). One decoder layer reads the target's last hidden
state f_i together with the embedding of the next token x_{i+1}, predicts the next hidden state f_{i+1}, and
the target's own output layer turns it into logits. It drafts autoregressively in feature space: from the
second draft token on, its input is its own predicted feature. An EAGLE-3 drafter (the checkpoint's layout says
which, eagle_net.py) reads three of the target's layers instead of its last hidden state, and scores a draft
vocabulary with its own output layer; the proposer drafts with both alike.

The network and its loaded form are eagle_net.py's; drafting a tree on the device, eagle_tree.py's. Its KV cache
only ever holds positions computed from the target's true features: draft positions are dropped after each
proposal, and the accepted ones are fed again with the hidden states that the target computed for them while
verifying.
"""
from __future__ import annotations

import weakref

import torch

from ..options import EngineOptions
from ..rule.tree import depths as tree_depths
from .base import Draft, Feedback, Proposer, ProposerRequest
from .checkpoints import load_drafter
from .eagle_net import DraftCache, EagleDrafter
from .eagle_tree import CATCH_UP_ROWS, TreeDrafting

TREE_WIDTH = 8  # in a draft tree: nodes expanded at each depth, and children kept of each (EAGLE-2's top-k)


class EagleProposer(Proposer):
    name = "eagle"
    needs_target_hidden = True

    def __init__(self, drafter: EagleDrafter, options: EngineOptions | None = None):
        self.drafter = drafter
        self.target_layers = drafter.target_layers  # EAGLE-3's three layers, which the run's runner hands over
        self.options = options or EngineOptions.from_environment()  # graphs and compile for its trees
        self.trees = self._finalizer = None  # a tree run's drafting on the device, and what gives it back

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.cache = DraftCache(len(self.drafter.net.layers))
        features = self.drafter.feature_size
        check_width(target_hidden, features)
        self.pending = target_hidden if target_hidden is not None else torch.empty(0, features)
        # pending [P, F]: target features of positions cache.length .. cache.length + P - 1, not yet fed
        self.head_feature = None  # the drafter's output at position cache.length - 1, once pending is fed
        self.release()
        if self.tree_budget():  # trees draft on the device over a static cache (eagle_tree.py)
            self.trees = self._tree_drafting(prompt_ids.shape[0] + settings.max_new_tokens, settings.gamma)
            self._finalizer = weakref.finalize(self, self.trees.release)

    @property
    def tree_width(self) -> int:
        """TREE_WIDTH, or fewer where the draft vocabulary has fewer tokens: a node cannot keep more children
        than its head scores."""
        return min(TREE_WIDTH, self.drafter.head.scored)

    def _tree_drafting(self, length: int, gamma: int):
        rows = gamma + 1  # what a step feeds: the accepted drafts and the token before them
        scratch = max(rows + (gamma - 1) * self.tree_width, CATCH_UP_ROWS)  # slots written past the prefix
        return TreeDrafting(self.drafter, length + scratch + 1, rows, self.options)

    @torch.inference_mode()
    def warm_up(self, max_length: int, gamma: int, tree: int) -> None:
        """Capture (on a CUDA GPU, and compile) the tree-drafting graph that runs of up to max_length tokens
        with this gamma and tree will replay, before anything is timed: compiling it takes tens of seconds. The graph
        stays with the drafter's pool of caches for the runs after."""
        parts = self.drafter.parts
        if not tree or gamma < 1 or parts.device.type != "cuda" or not self.options.graphs:
            return  # nothing is captured: no cache to make
        trees = self._tree_drafting(max_length, gamma)
        features = torch.zeros(1, self.drafter.feature_size, device=parts.device, dtype=parts.dtype)
        trees.catch_up(features, torch.zeros(1, dtype=torch.long, device=parts.device))
        trees.step(features, torch.zeros(1, dtype=torch.long, device=parts.device), gamma, self.tree_width, tree)
        trees.release()

    def device_lookup(self, settings, runner):
        """Its chains and trees on the device (eagle_device.py), where the drafter sits beside the target."""
        parts = self.drafter.parts
        if parts.device != runner.device or parts.dtype != runner.dtype:
            return None
        from .eagle_device import EagleLookup
        from . import eagle_tree

        return EagleLookup(self.drafter, settings.gamma, settings.tree, self.tree_width, self.options,
                           captured=runner.use_graphs,
                           compiled=runner.use_graphs and runner.use_compile and not eagle_tree._compile_failed)

    def release(self) -> None:
        """Give a tree run's static cache (and its graphs) back to the drafter's pool."""
        if self._finalizer is not None:
            self._finalizer()
        self.trees = self._finalizer = None

    @torch.inference_mode()
    def _step(self, features, token_ids, start: int):
        """Feed positions start .. start + T - 1: features [T, F] (the target's, or the drafter's own [T, H]),
        token_ids [T] (x_{i+1} for position i)."""
        parts = self.drafter.parts
        positions = torch.arange(start, start + token_ids.shape[0], device=parts.device)
        cos, sin = parts.rotary(positions)
        embeds = parts.embed(token_ids.to(parts.device)).unsqueeze(0)
        out = self.drafter.net(features.to(parts.device, parts.dtype).unsqueeze(0), embeds, cos, sin, self.cache)
        return out[0, -1]

    @torch.inference_mode()
    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        length = tokens.shape[0]
        if self.trees is not None:
            return self._propose_tree(tokens, gamma)
        start = self.cache.length
        if self.pending.shape[0] and start + self.pending.shape[0] == length - 1:
            self.head_feature = self._step(self.pending, tokens[start + 1:], start)  # predicts f_{length - 1}
            self.pending = self.pending[:0]
        elif self.pending.shape[0] or self.head_feature is None or start != length - 1:
            return self.empty_draft(tokens.device)  # no target feature for the position before the last yet
        feature = self.head_feature
        drafted, all_probs, all_logits = [], [], []
        for i in range(gamma):
            logits = self.drafter.head.full_logits(feature)  # [V]
            token, probs = self.choose(logits)  # q
            drafted.append(token)
            all_probs.append(probs)
            all_logits.append(logits)
            if i + 1 < gamma:
                feature = self._step(feature.unsqueeze(0), torch.tensor([token]), length - 1 + i)
        self.cache.crop(length - 1)  # keep only positions computed from the target's own features
        device = tokens.device
        return Draft(torch.tensor(drafted, dtype=torch.long, device=device), torch.stack(all_probs).to(device),
                     torch.stack(all_logits).to(device))

    def _propose_tree(self, tokens: torch.Tensor, gamma: int) -> Draft:
        """EAGLE-2's dynamic tree (eagle_tree.py): at each depth the TREE_WIDTH nodes with the best path log
        probability are fed to the drafter together and each keeps its TREE_WIDTH likeliest next tokens; the
        `budget` best nodes of all form the tree. Fed first: the target's features of the positions accepted
        since the last step."""
        trees, length = self.trees, tokens.shape[0]
        pending = self.pending.shape[0]
        if not pending or trees.length + pending != length - 1:
            return self.empty_draft(tokens.device)  # no target feature for the position before the last yet
        features = self.pending.to(trees.device)
        token_ids = tokens[trees.length + 1: length]  # x_{i+1} beside f_i
        if pending > trees.max_rows:  # a prompt, or steps others drafted (adaptive): all but the last caught up
            trees.catch_up(features[:-1], token_ids[:-1])
            features, token_ids = features[-1:], token_ids[-1:]
        self.pending = self.pending[:0]
        # always the run's own depth: a shallower one (the last steps before max_new_tokens) would be a new
        # graph, and a new compile of seconds, in the middle of a timed run; the nodes too deep are dropped
        ids, parents = trees.step(features, token_ids, self.settings.gamma, self.tree_width, self.tree_budget())
        if gamma < self.settings.gamma:
            kept = sum(depth <= gamma for depth in tree_depths(parents))  # nodes come by depth, parents first
            ids, parents = ids[:kept], parents[:kept]
        return Draft(torch.tensor(ids, dtype=torch.long), None, None, parents)  # on the host, where the engine reads it

    def observe(self, feedback: Feedback) -> None:
        fed = self.trees.length if self.trees is not None else self.cache.length
        known = fed + self.pending.shape[0]  # positions with a target feature
        new = feedback.tokens.shape[0] - 1 - known
        if new > 0 and feedback.target_hidden is not None:
            check_width(feedback.target_hidden, self.drafter.feature_size)
            self.pending = torch.cat([self.pending.to(feedback.target_hidden), feedback.target_hidden[:new]])


def check_width(hidden: torch.Tensor | None, features: int) -> None:
    """Target features of the wrong width would be read as the drafter's own (EAGLE-3 tells the two apart by width):
    a runner made without the proposer's target_layers is a mistake to stop at once."""
    if hidden is not None and hidden.shape[-1] != features:
        raise ValueError(f"the EAGLE drafter reads target features of width {features}, but was handed "
                         f"{hidden.shape[-1]}: make the runner with features=proposer.target_layers")


def build(request: ProposerRequest) -> EagleProposer:
    """`eagle`'s proposer (specviz.methods): the feature drafter of --heads, or the one shipped for the target."""
    return EagleProposer(load_drafter("eagle", request.target, request.heads, request.options), request.options)
