"""A causal LM together with its KV cache. Every call on a transformers cache lives in this module, because
the cache API moves between transformers releases (docs/design.md, "Pitfalls").

The runner keeps the invariant `cache holds exactly the first `length` tokens of the sequence`: forward()
appends tokens at the end, rollback() drops rejected ones, so accepted prefixes are never recomputed.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from ..models.configs import scales_logits, text_config
from ..models.loading import input_device


def _cache_keyword(model) -> str:
    """transformers 5.18+ names the forward argument `cache`; earlier releases `past_key_values`."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _has_plain_output_layer(model) -> bool:
    """True when logits = output_layer(decoder(x)) with nothing in between, so that the runner can compute
    logits only at the positions it needs and return the hidden states for free."""
    if scales_logits(text_config(model.config)):
        return False
    return model.get_output_embeddings() is not None and model.get_decoder() is not model


def new_cache() -> DynamicCache:
    # No config on purpose: plain layers for every model, so that rolling back works everywhere
    # (sliding-window layers refuse to roll back once full).
    return DynamicCache()


def cache_length(cache) -> int:
    length = cache.get_seq_length()
    return int(length.item()) if torch.is_tensor(length) else int(length)


def drop_last(cache, count: int) -> None:
    """Remove the last `count` tokens. A negative argument means "remove this many" in every 5.x release
    (5.18+ accepts only that form; earlier ones read a positive argument as a length)."""
    if count > 0:
        cache.crop(-count)


def repeat_rows(cache, count: int) -> None:
    """Each row of the cache `count` times over, in place (row 0's copies first): a batch whose rows share one
    prefill."""
    if count > 1:
        cache.batch_repeat_interleave(count)


def layer_keys_values(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of every layer, for tests that compare a cache with a fresh prefill."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(k, v) for k, v in zip(cache.key_cache, cache.value_cache)]



def check_feature_layers(features, layers: int) -> tuple[int, ...] | None:
    """A runner's feature layers, checked: distinct layer indices of the model, ascending, short of the last (whose
    output transformers hands over after the final norm); None or () for none."""
    if not features:
        return None
    features = tuple(int(i) for i in features)
    if sorted(set(features)) != list(features) or not all(0 <= i < layers - 1 for i in features):
        raise ValueError(f"feature layers {features} are not distinct ascending layers of a {layers}-layer model "
                         f"before its last (0 to {layers - 2})")
    return features


def layer_features(outputs: list[torch.Tensor], features: tuple[int, ...]) -> torch.Tensor:
    """The outputs [K, H] of the feature layers, in order, side by side: [K, len(features) * H] (HF's
    hidden_states[i + 1] for each layer i, as DFlash's and EAGLE-3's drafters read them)."""
    assert len(outputs) == len(features), "one output a feature layer"
    return torch.cat(outputs, dim=-1)


class CausalRunner:
    """Runs new tokens of one sequence (batch 1) through a causal LM with a KV cache. It has what the engine
    asks of any runner (runners.static.StaticRunner has it too): forward, rollback, reset, length, device,
    supports_tree, warm_up, release. features: the layers whose outputs `hidden` holds (layer_features), else
    the last hidden state."""

    supports_tree = False  # draft trees need the fast path's tree attention

    def __init__(self, model, features: tuple[int, ...] | None = None):
        self.model = model
        self.device = input_device(model)
        self._cache_keyword = _cache_keyword(model)
        self._split_output_layer = _has_plain_output_layer(model)
        self.features = check_feature_layers(features, text_config(model.config).num_hidden_layers)
        self.cache = new_cache()
        self.length = 0  # tokens in the cache

    def reset(self) -> None:
        self.cache = new_cache()
        self.length = 0

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, logits_for: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
        """Append token_ids [K] to the sequence. Returns (logits [K or 1, V] float32, hidden [K, H]).
        logits_for="last" computes the output layer at the last position only (prefill); "none" (no logits
        wanted) does the same here."""
        token_ids = token_ids.to(self.device)
        count = token_ids.shape[0]
        positions = torch.arange(self.length, self.length + count, device=self.device).unsqueeze(0)
        inputs = {"input_ids": token_ids.unsqueeze(0), "position_ids": positions, "use_cache": True,
                  self._cache_keyword: self.cache}
        if self._split_output_layer:
            out = self.model.get_decoder()(**inputs, output_hidden_states=self.features is not None)
            hidden = out.last_hidden_state[0]  # [K, H]
            head_input = hidden[-1:] if logits_for in ("last", "none") else hidden
            logits = self.model.get_output_embeddings()(head_input)
        else:
            out = self.model(**inputs, output_hidden_states=True)
            hidden = out.hidden_states[-1][0]
            logits = out.logits[0, -1:] if logits_for in ("last", "none") else out.logits[0]
        if self.features is not None:  # hidden_states[0] is the embedding, [i + 1] layer i's output
            hidden = layer_features([out.hidden_states[i + 1][0] for i in self.features], self.features)
        self.length += count
        assert cache_length(self.cache) == self.length, "KV cache out of step with the runner"
        # a sharded model ends on another device than it starts: hand results back where the tokens live
        return logits.float().to(self.device), hidden.to(self.device)

    def layer_keys_values(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return layer_keys_values(self.cache)

    def warm_up(self, max_positions: int, max_length: int, tree: int = 0) -> int:
        """Nothing to capture: no graphs here. Returns the number of graphs held (0)."""
        return 0

    def release(self) -> None:
        """Nothing held beyond the cache, which goes with the runner."""

    def rollback(self, length: int) -> None:
        """Keep only the first `length` tokens in the cache."""
        if length > self.length:
            raise ValueError(f"cannot roll forward: cache holds {self.length} tokens, asked for {length}")
        drop_last(self.cache, self.length - length)
        self.length = length
