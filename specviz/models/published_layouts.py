"""The file layouts of the published drafters that proposers/checkpoints.py loads, written with random weights:
file names, config.json keys, tensor names, shapes and dtypes as the published folders have them, so that
loading them and what drafting with them costs can be measured at a real size without downloading them.

- SafeAILab EAGLE-1 (yuhuili/EAGLE-Vicuna-7B-v1.3): config.json, a LlamaConfig of one layer with the Llama-1
  keys of transformers 4.28 (no num_key_value_heads, no rope_theta, no `bias`: their loader then takes
  bias=True), and pytorch_model.bin in float32 holding embed_tokens.weight (a copy of the target's), fc.weight
  [H, 2H], fc.bias [H] and one decoder layer without input_layernorm (EAGLE-1 drops it on its first layer);
  1,468,039,168 bytes of tensors at the 7B shape, the 1.47 GB the Hub lists.
- SafeAILab EAGLE-3 (eagle/model/cnets.py's Model; e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, as vLLM's
  llama_eagle3.py loads it): config.json, a LlamaConfig of one layer with the keys of EAGLE's
  eagle/traineagle3/config.json and draft_vocab_size (32,000 at the 8B shape), and pytorch_model.bin in float16
  holding fc.weight [H, 3H], the midlayer (q, k and v reading 2H; hidden_norm, input_layernorm,
  post_attention_layernorm), norm.weight, lm_head.weight [K, H], d2t [K] int64 and t2d [V] bool; no embedding
  (their training saves only what it trains). 849,379,328 bytes of float16 tensors at the 8B shape, besides the
  maps.
- z-lab DFlash (z-lab/dflash's model.py; e.g. z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat): config.json, a Qwen3Config
  of the draft layers with block_size, num_target_layers and dflash_config (target_layer_ids, mask_token_id), and
  model.safetensors in bfloat16 holding fc, hidden_norm, the draft layers (q and k norms included) and a final
  norm, with no embedding and no output layer (the target's are used).
- FasterDecoding Medusa-1 (FasterDecoding/medusa-vicuna-7b-v1.3): config.json with medusa_num_heads,
  medusa_num_layers, base_model_name_or_path and transformers_version, and medusa_lm_head.pt in bfloat16:
  per head "{h}.{layer}.linear.weight / .bias" (a ResBlock) and its own output layer "{h}.{layers}.weight"
  [V, H]. That config.json says 2 heads while the file holds 5 (their loader hard-codes 5); the 5 heads
  are 1,478,533,120 bytes, the 1.48 GB the Hub lists.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .configs import default_target_layers


@dataclass(frozen=True)
class Shape:
    """The target's numbers a drafter's files depend on."""
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    target: str  # the random target of this shape (random_target.py)
    layers: int = 32  # the target's (a DFlash drafter reads some of them by number)


SHAPES = {
    # Vicuna-7B v1.3 is Llama-1 7B: multi-head attention, rope theta 10000
    "vicuna-7b": Shape(hidden=4096, intermediate=11008, heads=32, kv_heads=32, vocab=32000, target="random:vicuna-7b"),
    "tiny": Shape(hidden=64, intermediate=128, heads=4, kv_heads=4, vocab=512, target="random:llama-tiny,kv_heads=4",
                  layers=2),
    # Llama 3.1 8B: grouped-query attention (8 key-value heads)
    "llama-8b": Shape(hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256, target="random:llama-8b"),
    "tiny-deep": Shape(hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=512, target="random:llama-tiny,layers=6",
                       layers=6),
}
DFLASH_FILE = "model.safetensors"
DFLASH_LAYERS = 5  # draft layers of the DFlash folder written
EAGLE_FILE = "pytorch_model.bin"
MEDUSA_FILE = "medusa_lm_head.pt"
MEDUSA_HEADS = 5  # in the file
MEDUSA_CONFIG_HEADS = 2  # what the published config.json says


def eagle1_config(shape: Shape) -> dict:
    config = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": shape.hidden, "initializer_range": 0.02, "intermediate_size": shape.intermediate,
              "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": shape.heads,
              "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
              "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True,
              "vocab_size": shape.vocab}
    if shape.kv_heads != shape.heads:  # as EAGLE's configs for grouped-query targets write it
        config["num_key_value_heads"] = shape.kv_heads
    return config


def eagle1_tensors(shape: Shape, bias: bool = True, embed: bool = True) -> dict[str, tuple[int, ...]]:
    h, head_dim = shape.hidden, shape.hidden // shape.heads
    shapes = {"embed_tokens.weight": (shape.vocab, h)} if embed else {}
    shapes.update({
        "layers.0.self_attn.q_proj.weight": (shape.heads * head_dim, h),
        "layers.0.self_attn.k_proj.weight": (shape.kv_heads * head_dim, h),
        "layers.0.self_attn.v_proj.weight": (shape.kv_heads * head_dim, h),
        "layers.0.self_attn.o_proj.weight": (h, shape.heads * head_dim),
        "layers.0.mlp.gate_proj.weight": (shape.intermediate, h),
        "layers.0.mlp.up_proj.weight": (shape.intermediate, h),
        "layers.0.mlp.down_proj.weight": (h, shape.intermediate),
        "layers.0.post_attention_layernorm.weight": (h,),
        "fc.weight": (h, 2 * h),
    })
    if bias:
        shapes["fc.bias"] = (h,)
    return shapes


EAGLE3_DRAFT_VOCAB = {"llama-8b": 32000}  # the published drafters' draft_vocab_size; other shapes: a quarter of V


def eagle3_draft_vocab(shape_name: str) -> int:
    return EAGLE3_DRAFT_VOCAB.get(shape_name) or SHAPES[shape_name].vocab // 4


def eagle3_config(shape: Shape, draft_vocab: int, layer_ids: list[int] | None = None) -> dict:
    """EAGLE's eagle/traineagle3/config.json at `shape` (LlamaForCausalLMEagle3, as SGLang names it); layer_ids:
    the target layers read in vLLM's numbering (eagle_aux_hidden_state_layer_ids), left out as theirs leave it
    (EAGLE-3's default then: 2, L // 2, L - 3)."""
    config = {"architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 128000, "eos_token_id": 128001,
              "hidden_act": "silu", "hidden_size": shape.hidden, "initializer_range": 0.02,
              "intermediate_size": shape.intermediate, "max_position_embeddings": 2048, "model_type": "llama",
              "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads, "num_hidden_layers": 1,
              "pad_token_id": 0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
              "transformers_version": "4.28.1", "use_cache": True, "vocab_size": shape.vocab,
              "draft_vocab_size": draft_vocab}
    if layer_ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
    return config


def eagle3_tensors(shape: Shape, draft_vocab: int) -> dict[str, tuple[int, ...]]:
    """The floating-point tensors (d2t and t2d, the integer maps, come beside them)."""
    h, head_dim = shape.hidden, shape.hidden // shape.heads
    return {
        "midlayer.self_attn.q_proj.weight": (shape.heads * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": (shape.kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": (shape.kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, shape.heads * head_dim),
        "midlayer.mlp.gate_proj.weight": (shape.intermediate, h),
        "midlayer.mlp.up_proj.weight": (shape.intermediate, h),
        "midlayer.mlp.down_proj.weight": (h, shape.intermediate),
        "midlayer.hidden_norm.weight": (h,), "midlayer.input_layernorm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
        "fc.weight": (h, 3 * h),
        "lm_head.weight": (draft_vocab, h),
    }


def eagle3_maps(vocab: int, draft_vocab: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """d2t and t2d for a draft vocabulary of random target ids (their training takes the most frequent ones)."""
    ids = torch.randperm(vocab, generator=generator)[:draft_vocab].sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return {"d2t": ids - torch.arange(draft_vocab), "t2d": t2d}


def write_eagle3(folder, shape: Shape, draft_vocab: int, seed: int = 0, dtype: torch.dtype = torch.float16,
                 std: float | None = None, config: dict | None = None, layer_ids: list[int] | None = None) -> dict:
    """An EAGLE-3 folder at `shape` with random weights and a random draft vocabulary; returns the state written."""
    generator = torch.Generator().manual_seed(seed)
    state = {name: _random(name, size, generator, std).to(dtype)
             for name, size in eagle3_tensors(shape, draft_vocab).items()}
    state.update(eagle3_maps(shape.vocab, draft_vocab, generator))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / EAGLE_FILE)
    (folder / "config.json").write_text(json.dumps(config or eagle3_config(shape, draft_vocab, layer_ids), indent=2)
                                        + "\n")
    return state


def medusa1_config(heads: int, layers: int = 1, base: str = "lmsys/vicuna-7b-v1.3") -> dict:
    return {"base_model_name_or_path": base, "medusa_num_heads": heads, "medusa_num_layers": layers,
            "transformers_version": "4.31.0"}


def medusa1_tensors(shape: Shape, heads: int = MEDUSA_HEADS, layers: int = 1) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for h in range(heads):
        for layer in range(layers):
            shapes[f"{h}.{layer}.linear.weight"] = (shape.hidden, shape.hidden)
            shapes[f"{h}.{layer}.linear.bias"] = (shape.hidden,)
        shapes[f"{h}.{layers}.weight"] = (shape.vocab, shape.hidden)
    return shapes


def _random(name: str, size: tuple[int, ...], generator: torch.Generator, std: float | None) -> torch.Tensor:
    """Weights scaled like an initialisation (1/sqrt(fan in)) unless `std` is given, norms near 1, so that
    activations stay finite in bfloat16 at the 7B shape."""
    values = torch.randn(size, generator=generator)
    if name.endswith("norm.weight"):
        return 1 + values * (std or 0.02)
    if name.endswith("bias"):
        return values * (std or 0.02)
    return values * (std or size[-1] ** -0.5)


def write_eagle1(folder, shape: Shape, seed: int = 0, dtype: torch.dtype = torch.float32, bias: bool = True,
                 embed: torch.Tensor | None = None, std: float | None = None, config: dict | None = None) -> dict:
    """An EAGLE-1 folder at `shape` with random weights (`embed`: the target's embeddings to copy in); returns
    the state written."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, size in eagle1_tensors(shape, bias).items():
        if name == "embed_tokens.weight" and embed is not None and tuple(embed.shape) == size:
            state[name] = embed.detach().to("cpu", dtype).clone()
        else:
            state[name] = _random(name, size, generator, std).to(dtype)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / EAGLE_FILE)
    (folder / "config.json").write_text(json.dumps(config or eagle1_config(shape), indent=2) + "\n")
    return state


def write_medusa1(folder, shape: Shape, heads: int = MEDUSA_HEADS, layers: int = 1, config_heads: int | None = None,
                  seed: int = 0, dtype: torch.dtype = torch.bfloat16, std: float | None = None) -> dict:
    """A Medusa-1 folder at `shape` with random weights; config.json says `config_heads` heads (the file
    holds `heads`). Their `[ResBlock] * layers` repeats one block, so every layer's keys hold the same
    tensors. Returns the state written."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, size in medusa1_tensors(shape, heads, layers).items():
        head, layer, rest = name.split(".", 2)
        first = f"{head}.0.{rest}"
        if rest.startswith("linear.") and first in state:
            state[name] = state[first]
        else:
            state[name] = _random(name, size, generator, std).to(dtype)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / MEDUSA_FILE)
    (folder / "config.json").write_text(json.dumps(medusa1_config(config_heads or heads, layers), indent=2) + "\n")
    return state


def dflash_config(shape: Shape, layers: int = DFLASH_LAYERS, block_size: int = 16, mask_token_id: int | None = None
                  ) -> dict:
    """z-lab's config.json: the draft layers shaped like the target's, reading as many of its layers as it has
    draft layers (their default), and the mask token (here the vocabulary's last id)."""
    head_dim = shape.hidden // shape.heads
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": shape.hidden,
            "intermediate_size": shape.intermediate, "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads, "head_dim": head_dim, "num_hidden_layers": layers,
            "num_target_layers": shape.layers, "block_size": block_size, "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0, "attention_bias": False, "hidden_act": "silu", "vocab_size": shape.vocab,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "dflash_config": {"target_layer_ids": default_target_layers(shape.layers, layers),
                              "mask_token_id": shape.vocab - 1 if mask_token_id is None else mask_token_id}}


def dflash_tensors(shape: Shape, layers: int = DFLASH_LAYERS, features: int | None = None) \
        -> dict[str, tuple[int, ...]]:
    h, head_dim = shape.hidden, shape.hidden // shape.heads
    shapes = {"fc.weight": (h, (features or layers) * h), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(layers):
        prefix = f"layers.{i}."
        shapes.update({
            prefix + "self_attn.q_proj.weight": (shape.heads * head_dim, h),
            prefix + "self_attn.k_proj.weight": (shape.kv_heads * head_dim, h),
            prefix + "self_attn.v_proj.weight": (shape.kv_heads * head_dim, h),
            prefix + "self_attn.o_proj.weight": (h, shape.heads * head_dim),
            prefix + "self_attn.q_norm.weight": (head_dim,), prefix + "self_attn.k_norm.weight": (head_dim,),
            prefix + "mlp.gate_proj.weight": (shape.intermediate, h),
            prefix + "mlp.up_proj.weight": (shape.intermediate, h),
            prefix + "mlp.down_proj.weight": (h, shape.intermediate),
            prefix + "input_layernorm.weight": (h,), prefix + "post_attention_layernorm.weight": (h,),
        })
    return shapes


def write_dflash(folder, shape: Shape, layers: int = DFLASH_LAYERS, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                 std: float | None = None, config: dict | None = None) -> dict:
    """A DFlash folder at `shape` with random weights; returns the state written."""
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    config = config or dflash_config(shape, layers)
    features = len(config["dflash_config"]["target_layer_ids"])
    state = {name: _random(name, size, generator, std).to(dtype)
             for name, size in dflash_tensors(shape, layers, features).items()}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / DFLASH_FILE))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return state


def write_published(out, shape_name: str, methods=("eagle", "medusa"), seed: int = 0) -> dict:
    """out/METHOD in the published layouts at a named shape, for each of `methods` (eagle, eagle3, medusa,
    dflash); returns what was written."""
    shape = SHAPES[shape_name]
    out = Path(out)
    writers = {"eagle": lambda: write_eagle1(out / "eagle", shape, seed=seed),
               "eagle3": lambda: write_eagle3(out / "eagle3", shape, eagle3_draft_vocab(shape_name), seed=seed + 3),
               "medusa": lambda: write_medusa1(out / "medusa", shape, config_heads=MEDUSA_CONFIG_HEADS, seed=seed + 1),
               "dflash": lambda: write_dflash(out / "dflash", shape, seed=seed + 2)}
    for method in methods:
        writers[method]()
    return {"shape": shape_name, "target": shape.target,
            "files": {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.glob("*/*")) if p.is_file()}}
