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


def default_target_layers(target_layers: int, count: int) -> list[int]:
    """z-lab's choice of the target layers read: one in the middle, or `count` spread from the second to the
    fourth from last (the last ones are close to the output, the first close to the tokens). A target too shallow
    for that gets `count` distinct layers spread over all but its last."""
    if count == 1:
        return [target_layers // 2]
    start, end = 1, target_layers - 3
    ids = [int(round(start + i * (end - start) / (count - 1))) for i in range(count)]
    if len(set(ids)) == count:
        return ids
    if count > target_layers - 1:
        raise ValueError(f"a target of {target_layers} layers has no {count} layers before its last to read")
    return [round(i * (target_layers - 2) / (count - 1)) for i in range(count)]
