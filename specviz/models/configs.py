"""Reading a transformers model's config: the text part of a multimodal one, and the fields that some model
families leave out (their defaults are the Llama recipe's)."""
from __future__ import annotations


def text_config(config):
    """The config of the language model itself (a multimodal model nests it)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def kv_heads(config) -> int:
    """Key-value heads: as many as attention heads where the config does not say (multi-head attention)."""
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def scales_logits(config) -> bool:
    """Whether the logits are more than the output layer's product (soft-capping, a scale)."""
    return bool(getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None))


def norm_eps(norm) -> float:
    """An RMSNorm module's epsilon, under either name transformers' models give it."""
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
