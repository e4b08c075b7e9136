"""The file layouts of the published drafters that proposers/checkpoints.py loads, written with random weights:
file names, config.json keys, tensor names, shapes and dtypes as the published folders have them, so that
loading them and what drafting with them costs can be measured at a real size without downloading them.

- SafeAILab EAGLE-1 (yuhuili/EAGLE-Vicuna-7B-v1.3): config.json, a LlamaConfig of one layer with the Llama-1
  keys of transformers 4.28 (no num_key_value_heads, no rope_theta, no `bias`: their loader then takes
  bias=True), and pytorch_model.bin in float32 holding embed_tokens.weight (a copy of the target's), fc.weight
  [H, 2H], fc.bias [H] and one decoder layer without input_layernorm (EAGLE-1 drops it on its first layer);
  1,468,039,168 bytes of tensors at the 7B shape, the 1.47 GB the Hub lists.
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


@dataclass(frozen=True)
class Shape:
    """The target's numbers a drafter's files depend on."""
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    target: str  # the random target of this shape (random_target.py)


SHAPES = {
    # Vicuna-7B v1.3 is Llama-1 7B: multi-head attention, rope theta 10000
    "vicuna-7b": Shape(hidden=4096, intermediate=11008, heads=32, kv_heads=32, vocab=32000, target="random:vicuna-7b"),
    "tiny": Shape(hidden=64, intermediate=128, heads=4, kv_heads=4, vocab=512, target="random:llama-tiny,kv_heads=4"),
}
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
    if name.endswith("layernorm.weight"):
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


def write_both(out, shape_name: str, seed: int = 0) -> dict:
    """out/eagle and out/medusa in the published layouts at a named shape; returns what was written."""
    shape = SHAPES[shape_name]
    out = Path(out)
    write_eagle1(out / "eagle", shape, seed=seed)
    write_medusa1(out / "medusa", shape, config_heads=MEDUSA_CONFIG_HEADS, seed=seed + 1)
    return {"shape": shape_name, "target": shape.target,
            "files": {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.glob("*/*")) if p.is_file()}}
