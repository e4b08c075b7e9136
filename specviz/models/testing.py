"""Tiny random models for tests and examples (vLLM's make_dummy idea): real transformers models, real
forward passes, small enough to run thousands of times on a CPU. Nothing else in the package imports this
module; random targets of a real shape (and their word tokenizer) are random_target.py's."""
from __future__ import annotations

import torch

from .loading import LoadedModel
from .random_target import word_tokenizer


def tiny_causal_lm(vocab_size: int = 16, seed: int = 0, layers: int = 2, hidden: int = 32,
                   sharpness: float = 2.0, context: int = 512) -> LoadedModel:
    """A random Llama with no tokenizer. `sharpness` scales the output layer so that its distributions are
    peaked like a trained model's rather than uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        # logits then have a standard deviation of about `sharpness`
        model.lm_head.weight.mul_(sharpness / (model.lm_head.weight.std() * hidden ** 0.5))
    return LoadedModel(name=f"tiny-{seed}", model=model, tokenizer=None, device=torch.device("cpu"),
                       dtype=torch.float32)


def perturbed_copy(base: LoadedModel, noise: float, seed: int = 1) -> LoadedModel:
    """The same architecture with noise added to every weight: a drafter that agrees with the target often,
    but not always."""
    import copy

    model = copy.deepcopy(base.model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std())
    return LoadedModel(name=f"{base.name}-perturbed", model=model, tokenizer=None, device=base.device,
                       dtype=base.dtype)


def save_tiny_model(folder, vocab_size: int = 32, seed: int = 0, layers: int = 4, tokenizer=None) -> str:
    """A tiny random Llama and a tokenizer, saved in save_pretrained layout: a model folder for load_model."""
    tiny_causal_lm(vocab_size=vocab_size, seed=seed, layers=layers).model.save_pretrained(folder)
    (tokenizer or word_tokenizer(vocab_size)).save_pretrained(folder)
    return str(folder)
