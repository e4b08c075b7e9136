"""What the app's step detail (specviz.device_loop.step_detail: the target's top tokens at every position of a
verify pass, as the app shows them) costs on the GPU, against other ways of computing the same numbers: each
replayed from a CUDA graph on random bfloat16 logits of the default target's vocabulary, and checked against
the shipped way.

    python3 -m scripts.gpu_detail_topk_probe [--widths 9,17,64 --top 20]
"""
import argparse

import torch

from scripts.gpu_bandwidth_probe import graph_ms
from specviz.device_loop import step_detail


def from_bf16_logits(logits, tokens, parent_rows, top):
    """The top tokens picked on the logits as they are (no float copy of the whole row is softmaxed); their
    probabilities from one log-sum-exp."""
    values, ids = logits.topk(top, dim=-1)
    norm = logits.float().logsumexp(-1, keepdim=True)
    drafted = logits.index_select(0, parent_rows).gather(1, tokens[:, None])[:, 0].float() - norm[parent_rows, 0]
    return torch.cat([(values.float() - norm).exp().flatten(), ids.float().flatten(), drafted.exp()])


def chunked(logits, tokens, parent_rows, top, chunks=48):
    """Top tokens in two rounds: the best of each of `chunks` slices, then the best of those."""
    width, vocab = logits.shape
    values, ids = logits.view(width, chunks, vocab // chunks).topk(top, dim=-1)
    ids = ids + torch.arange(chunks, device=logits.device)[:, None] * (vocab // chunks)
    best, where = values.flatten(1).topk(top, dim=-1)
    ids = ids.flatten(1).gather(1, where)
    norm = logits.float().logsumexp(-1, keepdim=True)
    drafted = logits.index_select(0, parent_rows).gather(1, tokens[:, None])[:, 0].float() - norm[parent_rows, 0]
    return torch.cat([(best.float() - norm).exp().flatten(), ids.float().flatten(), drafted.exp()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--widths", default="9,17,64")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=49152)
    args = parser.parse_args()
    device = torch.device("cuda")
    print(torch.cuda.get_device_name(device))
    ways = {"shipped (float softmax, topk)": step_detail, "topk on bf16, log-sum-exp": from_bf16_logits,
            "two-round topk on bf16, log-sum-exp": chunked}
    for width in map(int, args.widths.split(",")):
        logits = (torch.randn(width, args.vocab, device=device) * 3).bfloat16()
        tokens = torch.randint(0, args.vocab, (width - 1,), device=device)
        parents = torch.arange(width - 1, device=device)
        reference = step_detail(logits, tokens, parents, args.top)
        line = []
        for name, way in ways.items():
            out = way(logits, tokens, parents, args.top)
            cut = width * args.top
            same_ids = (out[cut:2 * cut] == reference[cut:2 * cut]).float().mean().item()  # ties may swap
            error = max((out[:cut] - reference[:cut]).abs().max().item(), (out[2 * cut:] - reference[2 * cut:]).abs().max().item())
            ms = graph_ms(lambda: way(logits, tokens, parents, args.top), inner=20, replays=50)
            line.append(f"{name} {ms * 1e3:.1f} us (ids in the same place {same_ids:.3f}, largest probability difference {error:.1e})")
        print(f"width {width}: " + "; ".join(line))


if __name__ == "__main__":
    main()
