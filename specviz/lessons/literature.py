"""The papers' own figures that lesson 4 quotes beside its measurements: what each kind of drafter reported, on
which targets, and where in the paper. Each figure was read in the paper's abstract or its repository's README
(docs/drafters.md lists the sources and what could not be checked); a figure not found there is not quoted."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LiteratureRange:
    drafter: str  # the kind of drafter
    methods: tuple[str, ...]  # specviz's methods of that kind (none: a kind specviz does not ship)
    speedup: str  # as reported, over plain decoding of the same target
    targets: str  # the target models it was measured on, and where
    source: str  # paper, arXiv id, and the part of it that states the figure


LITERATURE = [  # all on targets of 3B and more, on accelerators, at batch 1 unless said
    LiteratureRange("separate small draft model", ("draft", "early-exit"), "2-3x",
                    "T5-XXL 11B, one TPU-v4, batch 1",
                    "Leviathan et al. 2023, ICML, arXiv 2211.17192: abstract, section 4"),
    LiteratureRange("separate small draft model", ("draft",), "2-2.5x", "Chinchilla 70B, distributed",
                    "Chen et al. 2023, arXiv 2302.01318: abstract"),
    LiteratureRange("distilled draft model", (), "10-45% over the same speculative decoding with an undistilled "
                    "draft", "greedy and sampled, a range of standard benchmarks (target sizes not checked)",
                    "Zhou et al. 2023 (DistillSpec), arXiv 2310.08461: abstract"),
    LiteratureRange("Medusa heads", ("medusa",), "over 2.2x (Medusa-1, frozen target), 2.3-3.6x (Medusa-2)",
                    "Vicuna 7B-33B, Zephyr 7B (the heads the authors released)",
                    "Cai et al. 2024 (Medusa), arXiv 2401.10774: abstract; FasterDecoding/Medusa README"),
    LiteratureRange("EAGLE feature drafter", ("eagle", "adaptive"), "2.7-3.5x latency on LLaMA2-Chat 70B",
                    "Vicuna and LLaMA2-Chat 7B-70B, Mixtral 8x7B Instruct",
                    "Li et al. 2024 (EAGLE), ICML, arXiv 2401.15077: abstract"),
    LiteratureRange("retrieval from a datastore", ("retrieval",), "1.62-2.36x on code or text generation",
                    "7B and 13B models, batch 1", "He et al. 2024 (REST), NAACL, arXiv 2311.08252: abstract"),
    LiteratureRange("n-grams without a draft model", ("ngram",),
                    "up to 1.8x on MT-bench; 4x on code completion with strong scaling over several GPUs",
                    "n-grams from Jacobi iterations, not from the prompt (target sizes not checked)",
                    "Fu et al. 2024 (Lookahead decoding), ICML, arXiv 2402.02057: abstract"),
]


def literature_for(method: str) -> LiteratureRange | None:
    """The first row that names the method (a method with two papers quotes the first)."""
    return next((r for r in LITERATURE if method in r.methods), None)


def literature_lines() -> list[str]:
    """Every row as one line, the kinds specviz does not ship included."""
    return [f"{r.drafter}: {r.speedup}; {r.targets} ({r.source})" for r in LITERATURE]
