"""The DFlash drafter's network (DFlash, Chen, Liang and Liu 2026: block diffusion for speculative decoding) and
its loaded form. One forward drafts a whole block: its input is the block's first token (the last accepted one)
followed by mask tokens, its context the target's hidden states of every position before it, taken from several
of the target's layers, and each block position gets its own prediction of the token there, all at once.

The network is z-lab/dflash's (their model.py), so that their published drafters load unchanged (dflash_files.py):

- context: fc(the target layers' outputs side by side) -> hidden_norm: one vector a context position, which every
  draft layer projects to its keys and values (never through the layer's own input norm or MLP);
- block: the token embeddings (the target's own) through Qwen3-style decoder layers (q and k normalised per head),
  whose queries attend to the context's keys and values and to the whole block's (no causal mask inside it);
- output: a final norm, then the target's output layer (or its rows for a draft vocabulary).

The context's keys and values depend on the target's features alone, so a run keeps them in a cache of its own,
written once a position (feed_context); a drafting forward (draft_block) adds the block's at the slots after the
context, which the next feed overwrites. Training (train/dflash.py) runs many blocks of a sequence in one forward
with a mask that shows each block the context before it and itself (train_forward); the same projections serve
both (tests compare them).

Shapes: T positions, H hidden size, F = len(target_layer_ids) * H, nh / nkv attention / key-value heads, d head size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..models.configs import default_target_layers, head_dim, kv_heads
from ..runners.llama import layer_weights, rms_norm, rotate_half, sdpa_attention
from ..runners.onednn import onednn_allowed, onednn_linear, pack_matrix, parameter_bytes
from ..rule.tree_device import factored_tree
from .draft_head import DefaultRotary, DraftHead, TargetParts, rope_theta
from .eagle_net import MLP, RMSNorm

TREE_WIDTH = 8  # in a draft tree: the candidates each position offers (its likeliest tokens)
BLOCK_SIZE = 16  # a block's positions: its first token and 15 to draft (z-lab's b16 drafters)
MASK_TOKEN = "<empty_output>"  # the default target's mask token: a special token no chat ever writes


@dataclass
class DFlashConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    target_layer_ids: list[int]
    num_target_layers: int
    mask_token_id: int
    block_size: int = BLOCK_SIZE
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    extra: dict = field(default_factory=dict)  # a published config's other keys, written back unchanged

    @classmethod
    def like_target(cls, config, layers: int = 2, features: int = 5, mask_token_id: int = 0,
                    block_size: int = BLOCK_SIZE) -> "DFlashConfig":
        """Draft layers shaped like the target's own, reading `features` of its layers."""
        return cls(hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
                   num_attention_heads=config.num_attention_heads, num_key_value_heads=kv_heads(config),
                   head_dim=head_dim(config), num_hidden_layers=layers,
                   target_layer_ids=default_target_layers(config.num_hidden_layers, features),
                   num_target_layers=config.num_hidden_layers, mask_token_id=mask_token_id, block_size=block_size,
                   rms_norm_eps=config.rms_norm_eps, rope_theta=rope_theta(config))

    @classmethod
    def from_json(cls, data: dict) -> "DFlashConfig":
        """z-lab's config.json: a Qwen3Config with block_size, num_target_layers and dflash_config
        (target_layer_ids, mask_token_id; the layers default as their code chooses them)."""
        heads = data["num_attention_heads"]
        dflash = data.get("dflash_config") or {}
        layers = data["num_hidden_layers"]
        targets = data.get("num_target_layers")
        ids = dflash.get("target_layer_ids") or (default_target_layers(targets, layers) if targets else None)
        if ids is None or dflash.get("mask_token_id") is None:
            raise KeyError("dflash_config.target_layer_ids (or num_target_layers) and dflash_config.mask_token_id")
        known = {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "num_hidden_layers", "num_target_layers", "block_size", "rms_norm_eps", "rope_theta",
                 "attention_bias", "dflash_config", "specviz"}
        return cls(hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"],
                   num_attention_heads=heads, num_key_value_heads=data.get("num_key_value_heads") or heads,
                   head_dim=data.get("head_dim") or data["hidden_size"] // heads, num_hidden_layers=layers,
                   target_layer_ids=[int(i) for i in ids], num_target_layers=int(targets or max(ids) + 4),
                   mask_token_id=int(dflash["mask_token_id"]),
                   block_size=int(dflash.get("block_size") or data.get("block_size") or BLOCK_SIZE),
                   rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)), rope_theta=float(data.get("rope_theta", 1e4)),
                   attention_bias=bool(data.get("attention_bias", False)),
                   extra={k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict:
        """z-lab's key names, so that the folder reads like theirs."""
        return {**self.extra, "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
                "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
                "head_dim": self.head_dim, "num_hidden_layers": self.num_hidden_layers,
                "num_target_layers": self.num_target_layers, "block_size": self.block_size,
                "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
                "attention_bias": self.attention_bias, "hidden_act": "silu",
                "dflash_config": {"target_layer_ids": list(self.target_layer_ids),
                                  "mask_token_id": self.mask_token_id}}


class Attention(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        bias = c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=bias)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=bias)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)


class DecoderLayer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def keys_values(self, x, cos, sin):
        """x [..., T, H] -> k, v [..., T, nkv, d]: k normalised per head, rotary applied."""
        a = self.self_attn
        k = a.k_norm(a.k_proj(x).unflatten(-1, (a.kv_heads, a.head_dim)))
        v = a.v_proj(x).unflatten(-1, (a.kv_heads, a.head_dim))
        return rope(k, cos, sin), v

    def queries(self, x, cos, sin):
        a = self.self_attn
        return rope(a.q_norm(a.q_proj(x).unflatten(-1, (a.heads, a.head_dim))), cos, sin)


def rope(x, cos, sin):
    """x [..., T, heads, d], cos and sin [..., T, d]."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return x * cos + rotate_half(x) * sin


class DFlashNet(nn.Module):
    """fc and hidden_norm (the context), the draft layers and the final norm: z-lab's DFlashDraftModel without its
    rotary module (the rotary embedding is the drafter's, DFlashDrafter's) and without the embedding and output
    layer (the target's)."""

    def __init__(self, config: DFlashConfig):
        super().__init__()
        self.config = config
        features = len(config.target_layer_ids) * config.hidden_size
        self.fc = nn.Linear(features, config.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def context(self, features):
        """The target's features [..., T, F] -> the context vectors the layers project [..., T, H]."""
        return self.hidden_norm(self.fc(features))

    def train_forward(self, features, context_cos, context_sin, block_embeds, block_cos, block_sin, mask):
        """Many blocks of a batch of sequences in one forward. features [B, S, F]: the target's over each
        sequence; block_embeds [B, N, H]: the blocks' token embeddings side by side (N = blocks x block size);
        cos and sin [B or 1, S or N, d] at the context's and the blocks' positions; mask [B, N, S + N] (True: may
        attend): a block row sees the context before the block's first position and its own block's rows.
        Returns the blocks' outputs after the final norm [B, N, H]."""
        context = self.context(features)
        x = block_embeds
        for layer in self.layers:
            context_k, context_v = layer.keys_values(context, context_cos, context_sin)
            h = layer.input_layernorm(x)
            block_k, block_v = layer.keys_values(h, block_cos, block_sin)
            q = layer.queries(h, block_cos, block_sin).transpose(-3, -2)  # [B, nh, N, d]
            k = torch.cat([context_k, block_k], dim=-3).transpose(-3, -2)  # [B, nkv, S + N, d]
            v = torch.cat([context_v, block_v], dim=-3).transpose(-3, -2)
            groups = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(-3))
            x = x + layer.self_attn.o_proj(attended.transpose(-3, -2).flatten(-2))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)


class DraftCache(NamedTuple):
    """A drafter's keys and values by slot (position i at slot i), and its rotary tables: what the drafting
    functions read and write, as tensors (a compiled function guards on the objects it is given)."""

    keys: torch.Tensor  # [layers, nkv, capacity, d]
    values: torch.Tensor
    cos: torch.Tensor  # [capacity, d]
    sin: torch.Tensor


def drafter_rotary(config: DFlashConfig, parts: TargetParts):
    """The drafter's rotary embedding (positions [T] -> cos, sin [1, T, d]): the target's own where the drafter's
    config agrees with it (which keeps the target's rope scaling), else one of the config's theta."""
    same = rope_theta(parts.model.config) == config.rope_theta and head_dim(parts.model.config) == config.head_dim
    return parts.rotary if same else DefaultRotary(config.head_dim, config.rope_theta, parts.device, parts.dtype)


class LayerMatrices(NamedTuple):
    """One draft layer as drafting reads it: q, k and v in one matrix (kv: its k and v rows, for the context) and
    gate and up in another (runners.llama.layer_weights fuses them), prepacked for oneDNN on a CPU in float32."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    kv: torch.Tensor
    kv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    down: torch.Tensor
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor


class DFlashDrafter:
    """A loaded drafter bound to its target: the network, its matrices for drafting (LayerMatrices), the target's
    embedding and the output rows it scores, and the rotary embedding of its config (the target's own where
    they agree, which keeps its rope scaling)."""

    def __init__(self, net: DFlashNet, parts: TargetParts, head: DraftHead, source: str, onednn: bool = True):
        self.net, self.parts, self.head, self.source = net, parts, head, source
        self.config = c = net.config
        self.device, self.dtype = parts.device, parts.dtype
        packed = onednn and onednn_allowed(self.device, self.dtype, parameter_bytes(net))
        self.linear = onednn_linear if packed else F.linear  # the products drafting runs
        pack = pack_matrix if packed else (lambda matrix: matrix)
        q_rows = c.num_attention_heads * c.head_dim
        self.fc = pack(net.fc.weight.detach())
        self.layers = []
        for layer in net.layers:
            w = layer_weights(layer)
            kv_bias = None if w.qkv_bias is None else w.qkv_bias[q_rows:]
            self.layers.append(LayerMatrices(
                pack(w.qkv), w.qkv_bias, pack(w.qkv[q_rows:]), kv_bias, pack(w.o), w.o_bias, pack(w.gate_up),
                pack(w.down), w.input_norm, w.post_attention_norm, layer.self_attn.q_norm.weight.detach(),
                layer.self_attn.k_norm.weight.detach()))
        self.rotary = drafter_rotary(c, parts)

    @property
    def target_layers(self) -> tuple[int, ...]:
        return tuple(self.config.target_layer_ids)

    def new_cache(self, capacity: int) -> DraftCache:
        c = self.config
        shape = (c.num_hidden_layers, c.num_key_value_heads, capacity, c.head_dim)
        keys = torch.zeros(shape, device=self.device, dtype=self.dtype)
        with torch.no_grad():
            cos, sin = self.rotary(torch.arange(capacity, device=self.device))
        return DraftCache(keys, torch.zeros_like(keys), cos.reshape(capacity, -1).to(self.dtype).contiguous(),
                          sin.reshape(capacity, -1).to(self.dtype).contiguous())


def feed_context(drafter: DFlashDrafter, cache: DraftCache, features: torch.Tensor, slots: torch.Tensor) -> None:
    """Write the keys and values of context positions at `slots` [R] (their positions), from the target's
    features there [R, F], in every draft layer."""
    c, linear, eps = drafter.config, drafter.linear, drafter.config.rms_norm_eps
    context = rms_norm(linear(features.to(drafter.dtype), drafter.fc), drafter.net.hidden_norm.weight, eps)
    cos, sin = cache.cos[slots], cache.sin[slots]
    kv_heads, size = c.num_key_value_heads, c.head_dim
    for index, m in enumerate(drafter.layers):
        k, v = linear(context, m.kv, m.kv_bias).unflatten(-1, (2 * kv_heads, size)).split(kv_heads, dim=1)
        cache.keys[index].index_copy_(1, slots, rope(rms_norm(k, m.k_norm, eps), cos, sin).transpose(0, 1))
        cache.values[index].index_copy_(1, slots, v.transpose(0, 1))


def draft_block(drafter: DFlashDrafter, cache: DraftCache, first_token: torch.Tensor, start: torch.Tensor,
                span: int) -> torch.Tensor:
    """One drafting forward: the block [first_token, mask, ..., mask] at positions start .. start + block - 1
    (first_token [1], start [1]: the last accepted token and its position), attending to the cache's context
    (slots before start, fed) and to the whole block, written at the slots from start on (scratch: the next feed
    overwrites them). span: cache slots attended (>= start + block). Returns the block's outputs after the final
    norm [block, H]: row k predicts the token at start + k (row 0, the known token, is not a draft)."""
    c, linear, eps = drafter.config, drafter.linear, drafter.config.rms_norm_eps
    block, device = c.block_size, first_token.device
    ids = torch.cat([first_token, torch.full((block - 1,), c.mask_token_id, dtype=torch.long, device=device)])
    slots = start + torch.arange(block, device=device)
    cos, sin = cache.cos[slots], cache.sin[slots]
    mask = (torch.arange(span, device=device) < start + block).expand(block, span)
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    x = drafter.parts.embed(ids)
    for index, m in enumerate(drafter.layers):
        qkv = linear(rms_norm(x, m.input_norm, eps), m.qkv, m.qkv_bias).unflatten(-1, (heads + 2 * kv, c.head_dim))
        q = rope(rms_norm(qkv[:, :heads], m.q_norm, eps), cos, sin)
        k = rope(rms_norm(qkv[:, heads:heads + kv], m.k_norm, eps), cos, sin)
        cache.keys[index].index_copy_(1, slots, k.transpose(0, 1))
        cache.values[index].index_copy_(1, slots, qkv[:, heads + kv:].transpose(0, 1))
        attended = sdpa_attention(q, cache.keys[index][:, :span], cache.values[index][:, :span], mask, kv)
        x = x + linear(attended, m.o, m.o_bias)
        gate, up = linear(rms_norm(x, m.post_attention_norm, eps), m.gate_up).chunk(2, dim=-1)
        x = x + linear(F.silu(gate) * up, m.down)
    return rms_norm(x, drafter.net.norm.weight, eps)


def block_tree(drafter: DFlashDrafter, hidden: torch.Tensor, budget: int) -> torch.Tensor:
    """The block's outputs at the drafted positions [G, H] -> DDTree's tree of `budget` nodes [2, B] (token ids,
    parents): the best paths through each position's TREE_WIDTH likeliest tokens."""
    ids, scores = drafter.head.top_tokens(hidden, min(TREE_WIDTH, drafter.head.scored))
    return factored_tree(ids, scores, budget)
