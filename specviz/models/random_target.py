"""Targets of a stated shape with random weights (`--target random:llama-8b`): a Llama-architecture model built
from a config straight on the device, for measuring what a forward pass costs at a real size without
downloading one. Its tokens mean nothing (a word-level tokenizer over w0, w1, ...); its forward costs what a
trained model of that shape costs, which is all the cost curve and the weight-read floor need.

A spec is a shape's name, optionally followed by overrides: `random:llama-1.7b`, `random:llama-8b,layers=4`,
`random:hidden=256,layers=2,heads=4,kv_heads=2,intermediate=512,vocab=1000`.
"""
from __future__ import annotations

import torch

from ..errors import ModelLoadError

PREFIX = "random:"

# shapes of published models (their configs): SmolLM2-1.7B (with an untied output layer), Llama 3.1 8B and
# Vicuna-7B v1.3 (Llama 7B: multi-head attention, the target of the published EAGLE-1 and Medusa-1 drafters;
# rope theta 10000, LlamaConfig's default)
SHAPES = {
    "llama-1.7b": dict(hidden=2048, intermediate=8192, layers=24, heads=32, kv_heads=32, vocab=49152),
    "llama-8b": dict(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, vocab=128256),
    "vicuna-7b": dict(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, vocab=32000),
    "llama-tiny": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512),
}
KEYS = ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab")
CONTEXT = 4096


def is_random_target(name: str) -> bool:
    return str(name).startswith(PREFIX)


def parse_shape(name: str) -> dict[str, int]:
    """`random:SHAPE[,key=value...]` -> the shape's numbers."""
    parts = [part.strip() for part in name[len(PREFIX):].split(",") if part.strip()]
    shape: dict[str, int] = {}
    if parts and "=" not in parts[0]:
        base = parts.pop(0)
        if base not in SHAPES:
            raise ModelLoadError(f"unknown shape '{base}' in '{name}'; choose from {', '.join(SHAPES)}, or give "
                                 f"every number: {','.join(k + '=N' for k in KEYS)}")
        shape.update(SHAPES[base])
    for part in parts:
        key, _, value = part.partition("=")
        if key not in KEYS or not value.isdigit() or int(value) < 1:
            raise ModelLoadError(f"'{part}' in '{name}' is not KEY=N with KEY one of {', '.join(KEYS)}")
        shape[key] = int(value)
    missing = [key for key in KEYS if key not in shape]
    if missing:
        raise ModelLoadError(f"'{name}' leaves {', '.join(missing)} unset; name a shape ({', '.join(SHAPES)}) "
                             "or give every number")
    if shape["hidden"] % shape["heads"] or shape["heads"] % shape["kv_heads"]:
        raise ModelLoadError(f"'{name}': hidden must divide by heads, and heads by kv_heads")
    return shape


def word_tokenizer(vocab_size: int):
    """A whitespace word-level tokenizer over the words w0, w1, ... (w0 is the unknown word)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0")


def build_random_target(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """(model, tokenizer) of the shape `name` names, random weights made on `device` in `dtype`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = parse_shape(name)
    config = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                         intermediate_size=shape["intermediate"], num_hidden_layers=shape["layers"],
                         num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                         max_position_embeddings=CONTEXT, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None, dtype=dtype)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # made in the run's dtype: an 8B model in float32 first would need 32 GB
    try:
        with device:
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval(), word_tokenizer(shape["vocab"])

