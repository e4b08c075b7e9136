"""Random drafters for the tests: Medusa heads and EAGLE layers with random weights on a tiny target, and
the published file layouts (FasterDecoding's Medusa, SafeAILab's EAGLE-1) written with random weights."""
import json

import torch

from specviz.proposers.draft_head import DraftHead, TargetParts
from specviz.proposers.eagle import EagleConfig, EagleDrafter, EagleNet
from specviz.proposers.medusa import MedusaDrafter, MedusaHeads


def random_eagle(target, seed=0, token_ids=None, scale=0.3) -> EagleDrafter:
    torch.manual_seed(seed)
    config = EagleConfig.like_target(target.model.config)
    net = EagleNet(config).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * scale)  # make the random drafter opinionated
    parts = TargetParts(target.model, config.head_dim)
    return EagleDrafter(net, parts, DraftHead.from_target(parts, token_ids), "random")


def random_medusa(target, heads=3, seed=0, token_ids=None) -> MedusaDrafter:
    torch.manual_seed(seed)
    hidden = target.model.config.hidden_size
    module = MedusaHeads(hidden, heads).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    parts = TargetParts(target.model, hidden // target.model.config.num_attention_heads)
    return MedusaDrafter(module, [DraftHead.from_target(parts, token_ids)], "random")


def write_medusa_published(folder, target, heads=2, layers=1, vocab=None, hidden=None, seed=0):
    """FasterDecoding's layout: config.json + medusa_lm_head.pt, each head with its own output layer."""
    torch.manual_seed(seed)
    hidden = hidden or target.model.config.hidden_size
    vocab = vocab or target.vocab_size
    state = {}
    for h in range(heads):
        block = {"linear.weight": torch.randn(hidden, hidden) * 0.3, "linear.bias": torch.randn(hidden) * 0.1}
        for layer in range(layers):  # their `[ResBlock] * layers` repeats one block: same tensors
            for name, value in block.items():
                state[f"{h}.{layer}.{name}"] = value
        state[f"{h}.{layers}.weight"] = torch.randn(vocab, hidden)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "medusa_lm_head.pt")
    (folder / "config.json").write_text(json.dumps({"medusa_num_heads": heads, "medusa_num_layers": layers,
                                                    "base_model_name_or_path": "tiny", "transformers_version": "4.34"}))
    return state


def write_eagle_published(folder, target, seed=0, hidden=None, vocab=None, bias=True):
    """SafeAILab's EAGLE-1 layout: a LlamaConfig-like config.json and pytorch_model.bin."""
    torch.manual_seed(seed)
    c = target.model.config
    hidden = hidden or c.hidden_size
    vocab = vocab or target.vocab_size
    heads, kv, head_dim, inter = c.num_attention_heads, c.num_key_value_heads, hidden // c.num_attention_heads, c.intermediate_size
    r = lambda *shape: torch.randn(*shape) * 0.3
    state = {
        "embed_tokens.weight": target.model.get_input_embeddings().weight.detach().clone() if vocab == target.vocab_size and hidden == c.hidden_size else r(vocab, hidden),
        "fc.weight": r(hidden, 2 * hidden),
        "layers.0.self_attn.q_proj.weight": r(heads * head_dim, hidden),
        "layers.0.self_attn.k_proj.weight": r(kv * head_dim, hidden),
        "layers.0.self_attn.v_proj.weight": r(kv * head_dim, hidden),
        "layers.0.self_attn.o_proj.weight": r(hidden, heads * head_dim),
        "layers.0.mlp.gate_proj.weight": r(inter, hidden),
        "layers.0.mlp.up_proj.weight": r(inter, hidden),
        "layers.0.mlp.down_proj.weight": r(hidden, inter),
        "layers.0.post_attention_layernorm.weight": 1 + r(hidden),
    }
    if bias:
        state["fc.bias"] = r(hidden)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "pytorch_model.bin")
    config = {"architectures": ["LlamaForCausalLM"], "bias": bias, "hidden_act": "silu", "hidden_size": hidden,
              "intermediate_size": inter, "max_position_embeddings": 512, "model_type": "llama",
              "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": 1,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": vocab, "torch_dtype": "float16"}
    (folder / "config.json").write_text(json.dumps(config))
    return state
