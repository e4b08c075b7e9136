"""The papers' own figures that lesson 4 quotes beside its measurements: what each kind of drafter reported, on
which targets, and where (docs/drafters.md lists the sources and what was checked against them)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LiteratureRange:
    drafter: str  # the kind of drafter
    methods: tuple[str, ...]  # specviz's methods of that kind
    speedup: str  # as reported
    targets: str  # the target models it was measured on
    source: str


LITERATURE = [  # quoted from the papers' abstracts and tables, rounded; all on targets of 7B and more, on GPUs
    LiteratureRange("generic small draft model", ("draft", "early-exit"), "2-3.4x (alpha about 0.5-0.9)",
                    "T5-XXL 11B (T5-small drafts); LaMDA 137B", "Leviathan et al. 2023, ICML"),
    LiteratureRange("Medusa heads", ("medusa",), "2.2x (Medusa-1), 2.3-3.6x (Medusa-2)", "Vicuna 7B-33B, Zephyr 7B",
                    "Cai et al. 2024, Medusa, ICML"),
    LiteratureRange("EAGLE feature drafter", ("eagle", "adaptive"), "2.7-3.5x on LLaMA2-Chat 70B (tau about 3.5-4)",
                    "Vicuna 7B-33B, LLaMA2-Chat 7B-70B, Mixtral 8x7B", "Li et al. 2024, EAGLE, ICML"),
    LiteratureRange("retrieval / n-gram lookup", ("retrieval", "ngram"), "1.6-2.4x",
                    "CodeLlama 7B-13B, Vicuna 7B-13B", "He et al. 2024, REST, NAACL"),
]


def literature_for(method: str) -> LiteratureRange | None:
    return next((r for r in LITERATURE if method in r.methods), None)

