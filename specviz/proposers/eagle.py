"""`eagle`: a feature-level drafter (EAGLE, Li et al. 2024). One decoder layer reads the target's last hidden
state f_i together with the embedding of the next token x_{i+1}, predicts the next hidden state f_{i+1}, and
the target's own output layer turns it into logits. It drafts autoregressively in feature space: from the
second draft token on, its input is its own predicted feature.

Drafter position i has the input (f_i, embed(x_{i+1})) and the rotary position i, as in SafeAILab's code, so
that their published EAGLE-1 drafters load unchanged (checkpoints.py). Its KV cache only ever holds positions
computed from the target's true features: draft positions are dropped after each proposal, and the accepted
ones are fed again with the hidden states that the target computed for them while verifying.

Shapes: B batch, T positions, H hidden size, nh / nkv attention / key-value heads, d head size.
"""
from __future__ import annotations

import weakref
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..runners.graphs import graphs_allowed, no_cudnn_attention
from ..tree import depths as tree_depths
from .base import Draft, Feedback, Proposer
from .draft_head import DraftHead, TargetParts

TREE_WIDTH = 8  # in a draft tree: nodes expanded at each depth, and children kept of each (EAGLE-2's top-k)


@dataclass
class EagleConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int = 1
    rms_norm_eps: float = 1e-6
    fc_bias: bool = True  # EAGLE-1's config key "bias"
    qkv_bias: bool = False

    @classmethod
    def like_target(cls, config, num_layers: int = 1) -> "EagleConfig":
        """One decoder layer shaped like the target's own (EAGLE's choice)."""
        heads = config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size, intermediate_size=config.intermediate_size, num_attention_heads=heads,
            num_key_value_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            num_hidden_layers=num_layers, rms_norm_eps=config.rms_norm_eps,
        )

    @classmethod
    def from_json(cls, data: dict) -> "EagleConfig":
        """A published EAGLE-1 config.json (a LlamaConfig with num_hidden_layers = 1 and `bias`)."""
        heads = data["num_attention_heads"]
        return cls(
            hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=data.get("num_key_value_heads") or heads,
            head_dim=data.get("head_dim") or data["hidden_size"] // heads,
            num_hidden_layers=data.get("num_hidden_layers", 1), rms_norm_eps=data.get("rms_norm_eps", 1e-6),
            fc_bias=bool(data.get("bias", True)), qkv_bias=bool(data.get("qkv_bias", False)),
        )

    def to_json(self) -> dict:
        """EAGLE-1's key names, so that the file reads like theirs."""
        out = asdict(self)
        out["bias"] = out.pop("fc_bias")
        return out


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, c: EagleConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)


class MLP(nn.Module):
    def __init__(self, c: EagleConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderLayer(nn.Module):
    """A Llama decoder layer with EAGLE-1's one change: the first layer has no input norm (the fc output goes
    straight into attention). Parameter names are Llama's, hence EAGLE's."""

    def __init__(self, c: EagleConfig, index: int):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps) if index > 0 else None
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def project(self, x, cos, sin):
        """x [B, T, H] -> q [B, nh, T, d], k and v [B, nkv, T, d], rotary applied."""
        a = self.self_attn
        h = x if self.input_layernorm is None else self.input_layernorm(x)
        B, T, _ = h.shape
        q = a.q_proj(h).view(B, T, a.heads, a.head_dim).transpose(1, 2)
        k = a.k_proj(h).view(B, T, a.kv_heads, a.head_dim).transpose(1, 2)
        v = a.v_proj(h).view(B, T, a.kv_heads, a.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B or 1, 1, T, d]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def finish(self, x, attended):
        """attended [B, nh, T, d] -> the layer's output [B, T, H] (attention residual, then the MLP's)."""
        B, _, T, _ = attended.shape
        return self.finish_rows(x, attended.transpose(1, 2).reshape(B, T, -1))

    def finish_rows(self, x, attended):
        """finish() for attended laid out [B, T, nh * d]."""
        x = x + self.self_attn.o_proj(attended)
        return x + self.mlp(self.post_attention_layernorm(x))


# Not cuDNN's attention (fast.no_cudnn_attention): it builds a plan for every new sequence length, and a drafter's
# cache grows by one position a step, so on an H100 it made each draft token cost ~10 ms instead of ~0.2 ms.


def attend(q, k, v, mask):
    """q [B, nh, T, d], k and v [B, nkv, S, d], mask [T, S] bool (True = may attend) or None (all)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # each kv head serves `groups` query heads (as repeat_interleave, without a host sync)
        batch, kv_heads, length, size = k.shape
        k = k[:, :, None].expand(batch, kv_heads, groups, length, size).reshape(batch, kv_heads * groups, length, size)
        v = v[:, :, None].expand(batch, kv_heads, groups, length, size).reshape(batch, kv_heads * groups, length, size)
    with no_cudnn_attention():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def causal_mask(new: int, past: int, device) -> torch.Tensor | None:
    """[new, past + new]: new position i sees every cached position and the new ones up to itself."""
    if new == 1:
        return None
    cols = torch.arange(past + new, device=device)
    rows = torch.arange(new, device=device).unsqueeze(1) + past
    return cols <= rows


class DraftCache:
    """Keys and values of the drafter's layers for the first `length` positions ([1, nkv, length, d] each)."""

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, layer: int, k, v):
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            if k is not None:
                self.keys[i], self.values[i] = k[:, :, :length], v[:, :, :length]


class EagleNet(nn.Module):
    """fc(concat(embed(x_{i+1}), f_i)) -> decoder layer(s) -> predicted f_{i+1}. No final norm: the target's
    features are taken after its final norm, and its output layer reads them directly."""

    def __init__(self, config: EagleConfig):
        super().__init__()
        self.config = config
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=config.fc_bias)
        self.layers = nn.ModuleList([DecoderLayer(config, i) for i in range(config.num_hidden_layers)])

    def forward(self, features, embeds, cos, sin, cache: DraftCache | None = None, mask: torch.Tensor | None = None):
        """features, embeds [B, T, H]; cos, sin [B or 1, T, d] for the T positions. With a cache (batch 1), the
        positions follow the cached ones and are appended to it. mask [T, cached + T] (True = may attend)
        replaces the causal mask (a draft tree's). Returns [B, T, H]."""
        x = self.fc(torch.cat([embeds, features], dim=-1))
        past = cache.length if cache is not None else 0
        if mask is None:
            mask = causal_mask(x.shape[1], past, x.device)
        for index, layer in enumerate(self.layers):
            q, k, v = layer.project(x, cos, sin)
            if cache is not None:
                k, v = cache.append(index, k, v)
            x = layer.finish(x, attend(q, k, v, mask))
        return x


class EagleDrafter:
    """A loaded drafter bound to its target: the network, the target's embedding, rotary and output layer."""

    def __init__(self, net: EagleNet, parts: TargetParts, head: DraftHead, source: str):
        self.net = net
        self.parts = parts
        self.head = head
        self.source = source
        self.tree_workspaces: dict = {}  # cache capacity -> free eagle_tree.TreeWorkspace (graphs kept from run to run)


class EagleProposer(Proposer):
    name = "eagle"
    needs_target_hidden = True
    drafts_trees = True

    def __init__(self, drafter: EagleDrafter):
        self.drafter = drafter

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.cache = DraftCache(len(self.drafter.net.layers))
        hidden_size = self.drafter.net.config.hidden_size
        self.pending = target_hidden if target_hidden is not None else torch.empty(0, hidden_size)
        # pending [P, H]: target features of positions cache.length .. cache.length + P - 1, not yet fed
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
        from .eagle_tree import CATCH_UP_ROWS, TreeDrafting  # it builds on this module

        rows = gamma + 1  # what a step feeds: the accepted drafts and the token before them
        scratch = max(rows + (gamma - 1) * self.tree_width, CATCH_UP_ROWS)  # slots written past the prefix
        return TreeDrafting(self.drafter, length + scratch + 1, rows)

    @torch.inference_mode()
    def warm_up(self, max_length: int, gamma: int, tree: int) -> None:
        """Capture (on a CUDA GPU, and compile) the tree-drafting graph that runs of up to max_length tokens
        with this gamma and tree will replay, before anything is timed: compiling it takes 15-30 s. The graph
        stays with the drafter's pool of caches for the runs after."""
        parts = self.drafter.parts
        if not tree or gamma < 1 or parts.device.type != "cuda" or not graphs_allowed():
            return  # nothing is captured: no cache to make
        trees = self._tree_drafting(max_length, gamma)
        features = torch.zeros(1, self.drafter.net.config.hidden_size, device=parts.device, dtype=parts.dtype)
        trees.catch_up(features, torch.zeros(1, dtype=torch.long, device=parts.device))
        trees.step(features, torch.zeros(1, dtype=torch.long, device=parts.device), gamma, self.tree_width, tree)
        trees.release()

    def release(self) -> None:
        """Give a tree run's static cache (and its graphs) back to the drafter's pool."""
        if getattr(self, "_finalizer", None) is not None:
            self._finalizer()
        self.trees = self._finalizer = None

    @torch.inference_mode()
    def _step(self, features, token_ids, start: int):
        """Feed positions start .. start + T - 1: features [T, H], token_ids [T] (x_{i+1} for position i)."""
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
            self.pending = torch.cat([self.pending.to(feedback.target_hidden), feedback.target_hidden[:new]])
