"""The EAGLE drafter's network (EAGLE, Li et al. 2024) and its loaded form: one decoder layer (or a few) that reads
the target's last hidden state f_i with the embedding of the next token x_{i+1} and predicts f_{i+1}. The
proposer that drafts with it is eagle.py's; its tree drafting on the device, eagle_tree.py's; its training,
train/losses.py's.

Drafter position i has the input (f_i, embed(x_{i+1})) and the rotary position i, as in SafeAILab's code, so
that their published EAGLE-1 drafters load unchanged (checkpoints.py).

EAGLE-3 (Li et al. 2025; SafeAILab's eagle/model/cnets.py) is the same drafting with three changes, all here:
- f_i is the outputs of three of the target's layers (low, middle, high) side by side, [3H], which `fc` fuses
  into one vector [H]; from the second draft on the drafter reads its own output [H] there instead, unfused;
- its one layer ("midlayer") normalises that vector and the embedding separately and attends from both side by
  side ([2H] into q, k and v); the residual stream is the vector alone;
- its output goes through a final norm and its own output layer over a draft vocabulary (d2t maps a draft id d
  to the target id d + d2t[d]), so it does not predict the target's feature, only its tokens.
`EagleConfig.target_layers` says which kind a network is (None: EAGLE-1).

Shapes: B batch, T positions, H hidden size, nh / nkv attention / key-value heads, d head size.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..models.configs import head_dim, kv_heads
from ..runners.graphs import no_cudnn_attention
from .draft_head import DraftHead, TargetParts


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
    # EAGLE-3: the target layers whose outputs it reads (specviz's numbering: layer i's output), low to high;
    # None: EAGLE-1, which reads the target's final hidden state
    target_layers: tuple[int, ...] | None = None
    draft_vocab_size: int | None = None  # EAGLE-3: the rows of its own output layer (its draft vocabulary's size)

    @property
    def eagle3(self) -> bool:
        return self.target_layers is not None

    @property
    def feature_size(self) -> int:
        """The width of the target features it reads: H, or H for each layer EAGLE-3 reads."""
        return self.hidden_size * (len(self.target_layers) if self.eagle3 else 1)

    @classmethod
    def like_target(cls, config, num_layers: int = 1, target_layers=None, draft_vocab_size=None) -> "EagleConfig":
        """One decoder layer shaped like the target's own (EAGLE's choice); target_layers and draft_vocab_size:
        EAGLE-3's."""
        heads = config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size, intermediate_size=config.intermediate_size, num_attention_heads=heads,
            num_key_value_heads=kv_heads(config), head_dim=head_dim(config),
            num_hidden_layers=num_layers, rms_norm_eps=config.rms_norm_eps,
            target_layers=tuple(target_layers) if target_layers is not None else None,
            draft_vocab_size=draft_vocab_size,
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
        out.pop("target_layers")
        out.pop("draft_vocab_size")
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
    def __init__(self, c: EagleConfig, inputs: int | None = None):
        """inputs: the width q, k and v read (EAGLE-3's: the embedding and the hidden vector side by side)."""
        super().__init__()
        inputs = inputs or c.hidden_size
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(inputs, c.num_attention_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(inputs, c.num_key_value_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(inputs, c.num_key_value_heads * c.head_dim, bias=c.qkv_bias)
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

    def attention_input(self, x, embeds):
        """What q, k and v are computed from: x, normalised but on the first layer."""
        return x if self.input_layernorm is None else self.input_layernorm(x)

    def project(self, x, cos, sin, embeds=None):
        """x [B, T, H] -> q [B, nh, T, d], k and v [B, nkv, T, d], rotary applied. embeds: the tokens' embeddings
        [B, T, H], which EAGLE-3's layer reads beside x (EAGLE-1's read them through fc)."""
        a = self.self_attn
        h = self.attention_input(x, embeds)
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


class Eagle3Layer(DecoderLayer):
    """EAGLE-3's midlayer: hidden_norm(x) and input_layernorm(embedding) side by side into attention, the residual
    stream x alone. Parameter names are theirs (checkpoints.py maps midlayer.* to layers.0.*)."""

    def __init__(self, c: EagleConfig):
        nn.Module.__init__(self)
        self.self_attn = Attention(c, 2 * c.hidden_size)
        self.mlp = MLP(c)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def attention_input(self, x, embeds):
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(x)], dim=-1)


# Not cuDNN's attention (runners.graphs.no_cudnn_attention): it builds a plan for every new sequence length, and a
# drafter's cache grows by one position a step, so every draft token would pay for a new plan.


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
    """EAGLE-1: fc(concat(embed(x_{i+1}), f_i)) -> decoder layer(s) -> predicted f_{i+1}. No final norm: the
    target's features are taken after its final norm, and its output layer reads them directly.
    EAGLE-3: fc(f_i of three layers) -> midlayer (reading the embedding beside it) -> an output whose final norm
    (`norm`) its own output layer (`lm_head`, over its draft vocabulary) reads."""

    def __init__(self, config: EagleConfig):
        super().__init__()
        self.config = config
        if config.eagle3:
            if config.num_hidden_layers != 1:
                raise ValueError("an EAGLE-3 drafter has one layer")
            self.fc = nn.Linear(config.feature_size, config.hidden_size, bias=False)
            self.layers = nn.ModuleList([Eagle3Layer(config)])
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
            # trained here with the rest; once loaded, the DraftHead holds its weight (and drops it from the net)
            self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        else:
            self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=config.fc_bias)
            self.layers = nn.ModuleList([DecoderLayer(config, i) for i in range(config.num_hidden_layers)])

    def start(self, features, embeds):
        """(x, embeds for the layers): the first layer's input from features [..., F] and the embeddings of the next
        tokens [..., H]. EAGLE-3 fuses target features (F = feature_size) and reads its own earlier outputs
        (F = H) as they are; the width tells them apart, as in SafeAILab's code."""
        if not self.config.eagle3:
            return self.fc(torch.cat([embeds, features], dim=-1)), None
        if features.shape[-1] != self.config.hidden_size:
            features = self.fc(features)
        return features, embeds

    def forward(self, features, embeds, cos, sin, cache: DraftCache | None = None, mask: torch.Tensor | None = None):
        """features [B, T, F], embeds [B, T, H]; cos, sin [B or 1, T, d] for the T positions. With a cache (batch
        1), the positions follow the cached ones and are appended to it. mask [T, cached + T] (True = may attend)
        replaces the causal mask (a draft tree's). Returns [B, T, H]."""
        x, embeds = self.start(features, embeds)
        past = cache.length if cache is not None else 0
        if mask is None:
            mask = causal_mask(x.shape[1], past, x.device)
        for index, layer in enumerate(self.layers):
            q, k, v = layer.project(x, cos, sin, embeds)
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
        self.target_layers = net.config.target_layers  # EAGLE-3's, which the run's runner hands over side by side
        self.feature_size = net.config.feature_size
        # (capacity, attention kernel) -> free eagle_tree.TreeWorkspaces (their graphs kept)
        self.tree_workspaces: dict = {}
