"""`medusa`'s drafting on the device, for the device loop (device_loop.py): every head at once from the target's
hidden state, as a few batched products a CUDA graph can hold; chains, and trees of the best paths through each
head's likeliest tokens (MedusaProposer's tree, tree.product_tree).

The heads share their work: one hidden state goes through every head's residual blocks as one batched product
a block (the heads' weights stacked once), and heads that share an output layer (those trained here: the
target's rows for their draft vocabulary) score all heads' features in one product. On the host each head is
its own chain of kernels and its own full-vocabulary output layer. The hidden state is the target's at the
position before the last token, handed over by observe() inside the verify graph. Nothing here reads a value
back to the host; the drafts are MedusaProposer's (tests compare them step by step).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runners.graphs import compiled_static
from ..rule.sampling import drafter_pick, exponential_noise
from ..rule.tree_device import tree_layout
from .base import DeviceLookup


class MedusaSpace:
    """The heads' weights stacked for batched products, and the hidden state the next draft reads [H]."""

    def __init__(self, drafter, count: int, device):
        blocks = drafter.heads.blocks[:count]
        self.weights = torch.stack([torch.stack([block.linear.weight.detach() for block in head]) for head in blocks])
        self.biases = torch.stack([torch.stack([block.linear.bias.detach() for block in head]) for head in blocks])
        self.weights = self.weights.transpose(2, 3).contiguous()  # [heads, layers, H_in, H_out]: x @ W
        self.hidden = torch.zeros(self.weights.shape[-1], device=device, dtype=self.weights.dtype)


def head_features(hidden, weights, biases):
    """MedusaHeads' features of every head at once: hidden [H] -> [heads, H]; each block x + SiLU(W x + b)."""
    x = hidden[None, None, :].expand(weights.shape[0], 1, -1)
    for layer in range(weights.shape[1]):
        x = x + F.silu(torch.baddbmm(biases[:, layer, None, :], x, weights[:, layer]))
    return x[:, 0]


def medusa_logits(hidden, weights, biases, outputs):
    """Each head's logits over the tokens its output layer scores, [heads, K] float32 (outputs: one DraftHead
    shared by every head, or one a head of the same draft vocabulary)."""
    features = head_features(hidden, weights, biases)
    if len(outputs) == 1:
        return outputs[0].sub_logits(features)
    return torch.stack([out.sub_logits(features[k]) for k, out in enumerate(outputs)])


def medusa_chain(hidden, weights, biases, outputs, gamma: int, warp=None, noise=None, shown: bool = False):
    """MedusaProposer's chain: head k's token for draft position k (k < heads), zeros past them up to gamma.
    Greedy: each head's argmax; sampled (warp as eagle_device.draft_chain's, noise [heads, K]): a draw from each
    head's warped distribution q. Returns (tokens [gamma], q [gamma, V] or None; shown, greedy: each head's
    softmax, what the app shows of the drafter)."""
    logits = medusa_logits(hidden, weights, biases, outputs)
    heads, head = logits.shape[0], outputs[0]
    tokens, q, _ = drafter_pick(logits, head.token_ids, head.vocab_size, warp, noise, shown)
    if q is not None:
        q = torch.cat([q, q.new_zeros(gamma - heads, q.shape[1])])
    return torch.cat([tokens, tokens.new_zeros(gamma - heads)]), q


def product_tree_nodes(ids, values, budget: int):
    """tree.product_tree on the device: ids, values [D, K] (each depth's candidates and log probabilities, best
    first; a path scores the sum of its nodes') -> (tokens [N], parents [N]), the `budget` best paths' nodes,
    N = min(budget, every path), best first, so parents come before their children (a tie keeps the shallower
    node first). Level by level, with shapes fixed: a node among the best `budget` has its parent among the best
    `budget` of the level above. The same nodes as product_tree's; their order is by score, not preorder."""
    depth, k = ids.shape
    scores, tokens = [values[0]], [ids[0]]
    parents = [torch.full((k,), -1, dtype=torch.long, device=ids.device)]
    start = 0  # where the level above starts among all the levels' nodes
    for d in range(1, depth):
        above = scores[-1]
        joined = (above[:, None] + values[d][None, :]).reshape(-1)
        best, index = joined.topk(min(budget, joined.shape[0]))
        scores.append(best)
        tokens.append(ids[d].index_select(0, index % k))
        parents.append(start + torch.div(index, k, rounding_mode="floor"))
        start += above.shape[0]
    scores, tokens, parents = torch.cat(scores), torch.cat(tokens), torch.cat(parents)
    count = min(budget, scores.shape[0])
    order = scores.sort(descending=True, stable=True).indices[:count]
    position = torch.full_like(parents, -1).index_copy_(0, order, torch.arange(count, device=ids.device))
    kept = parents.index_select(0, order)
    return tokens.index_select(0, order), torch.where(kept >= 0, position.index_select(0, kept.clamp(min=0)), -1)


def medusa_tree(hidden, weights, biases, drafter, k: int, budget: int):
    """MedusaProposer's tree, laid out as the device loop's trees are (tree_layout): each head's k likeliest
    tokens (MedusaDrafter.top_tokens_of), the budget best paths through them."""
    ids, values = drafter.top_tokens_of(head_features(hidden, weights, biases), k)
    tokens, parents = product_tree_nodes(ids, values, budget)
    return tree_layout(tokens, parents, budget, ids.shape[0])


class MedusaLookup(DeviceLookup):
    """MedusaProposer's chains on the device: min(gamma, heads) tokens a step; with tree > 0, its trees of that
    many nodes and that depth. compiled: the chains through torch.compile."""

    has_q = True
    min_prompt = 2

    def __init__(self, drafter, gamma: int, compiled: bool = False, tree: int = 0, top_k: int = 0):
        self.drafter, self.gamma, self.tree = drafter, gamma, tree
        self.top_k = top_k  # candidates a head in a tree (MedusaProposer's count for this tree size)
        self.count = min(gamma, drafter.heads.num_heads)
        self.outputs = drafter.outputs[:self.count]
        self._chain = compiled_static(medusa_chain) if compiled else medusa_chain

    def key(self) -> tuple:
        return ("medusa", id(self.drafter), self.gamma, self.tree)

    def workspace(self, device, capacity: int) -> MedusaSpace:
        return MedusaSpace(self.drafter, self.count, device)

    def start(self, sequence, hidden) -> None:
        self.space.hidden.copy_(hidden[-1])

    def _length(self, tokens):
        return torch.full((), self.count, dtype=torch.long, device=tokens.device)

    def draft(self, sequence, length, span):
        space = self.space
        tokens, _ = self._chain(space.hidden, space.weights, space.biases, self.outputs, self.gamma)
        return tokens, self._length(tokens)

    def draft_shown(self, sequence, length, span):
        space = self.space
        tokens, shown = self._chain(space.hidden, space.weights, space.biases, self.outputs, self.gamma, shown=True)
        return tokens, self._length(tokens), shown

    def sample(self, sequence, length, span, warp, generator):
        space = self.space
        noise = exponential_noise((self.count, self.outputs[0].scored), generator, sequence.device)
        tokens, q = self._chain(space.hidden, space.weights, space.biases, self.outputs, self.gamma,
                                (warp.temperature, warp.top_k, warp.top_p, warp.filtered), noise)
        return tokens, self._length(tokens), q

    def draft_tree(self, sequence, length, span):
        space = self.space
        return medusa_tree(space.hidden, space.weights, space.biases, self.drafter, self.top_k, self.tree)

    def observe(self, hidden, rows, accepted) -> None:
        """The hidden state at the last accepted position: the next token was chosen from it."""
        self.space.hidden.copy_(hidden.index_select(0, rows.index_select(0, accepted[None]))[0])
