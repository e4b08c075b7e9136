"""Random drafters for the tests: Medusa heads, EAGLE and EAGLE-3 layers and a DFlash block drafter with random
weights on a tiny target, and
the published file layouts (FasterDecoding's Medusa, SafeAILab's EAGLE-1) written with random weights."""
import torch

from specviz.proposers.dflash_net import DFlashConfig, DFlashDrafter, DFlashNet
from specviz.proposers.draft_head import DraftHead, TargetParts
from specviz.proposers.eagle_net import EagleConfig, EagleDrafter, EagleNet
from specviz.proposers.medusa_net import MedusaDrafter, MedusaHeads
from specviz.models.published_layouts import Shape, write_eagle1, write_medusa1


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


def _shape(target, hidden=None, vocab=None) -> Shape:
    c = target.model.config
    return Shape(hidden=hidden or c.hidden_size, intermediate=c.intermediate_size, heads=c.num_attention_heads,
                 kv_heads=c.num_key_value_heads, vocab=vocab or target.vocab_size, target=target.name)


def write_medusa_published(folder, target, heads=2, layers=1, vocab=None, hidden=None, seed=0):
    """FasterDecoding's layout: config.json + medusa_lm_head.pt, each head with its own output layer."""
    return write_medusa1(folder, _shape(target, hidden, vocab), heads, layers, seed=seed, dtype=torch.float32, std=0.3)


def write_eagle_published(folder, target, seed=0, hidden=None, vocab=None, bias=True):
    """SafeAILab's EAGLE-1 layout: a LlamaConfig-like config.json and pytorch_model.bin."""
    return write_eagle1(folder, _shape(target, hidden, vocab), seed=seed, bias=bias, std=0.3,
                        embed=target.model.get_input_embeddings().weight)


def random_eagle3(target, layers=(0, 1, 2), seed=0, token_ids=None, scale=0.3) -> EagleDrafter:
    """An EAGLE-3 drafter with random weights reading `layers` of the target, its own output layer over
    `token_ids` (None: the whole vocabulary)."""
    torch.manual_seed(seed)
    vocab = target.vocab_size
    config = EagleConfig.like_target(target.model.config, target_layers=layers,
                                     draft_vocab_size=vocab if token_ids is None else len(token_ids))
    net = EagleNet(config).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * scale)
    parts = TargetParts(target.model, config.head_dim)
    head = DraftHead(net.lm_head.weight.detach(), vocab, token_ids, norm=net.norm, selected=True)
    return EagleDrafter(net, parts, head, "random")


def random_dflash(target, mask_token_id: int, seed=0, block=8, features=2, token_ids=None,
                  scale=0.3) -> DFlashDrafter:
    """A DFlash block drafter with random weights: two layers shaped like the target's, reading `features` of its
    layers, blocks of `block` with `mask_token_id` at the positions to draft."""
    torch.manual_seed(seed)
    config = DFlashConfig.like_target(target.model.config, layers=2, features=features,
                                      mask_token_id=mask_token_id, block_size=block)
    net = DFlashNet(config).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * scale)
    net.to(target.device, target.dtype)
    parts = TargetParts(target.model, config.head_dim)
    return DFlashDrafter(net, parts, DraftHead.from_target(parts, token_ids), "random")
