"""The papers' own figures that lesson 4 quotes beside its measurements: what each kind of drafter reported, on
which targets and hardware, and where in the paper; and Spec-Bench's leaderboard rows for the methods specviz
has, beside specviz's own figures. Each figure was read in its source (`checked` says where, or that it could
not be; docs/drafters.md lists them); a figure not found there is not quoted."""
from __future__ import annotations

from dataclasses import dataclass

from ..measure.figures import HOST_LOOP_NGRAM, Figure, headline


@dataclass
class LiteratureRange:
    drafter: str  # the kind of drafter
    methods: tuple[str, ...]  # specviz's methods of that kind (none: a kind specviz does not ship)
    speedup: str  # as reported, over plain decoding of the same target
    targets: str  # the target models it was measured on, and where
    source: str  # paper, arXiv id, and the part of it that states the figure
    checked: str = ""  # where the figure was read, or what of it could not be checked


LITERATURE = [  # all on targets of 3B and more, on accelerators, at batch 1 unless said
    LiteratureRange("separate small draft model", ("draft", "early-exit"), "2-3x",
                    "T5-XXL 11B, one TPU-v4, batch 1",
                    "Leviathan et al. 2023, ICML, arXiv 2211.17192: abstract, section 4",
                    "2X-3X on T5-XXL against the standard T5X implementation, identical outputs: the abstract (Google "
                    "Research's publication page); the TPU-v4 (section 4) not checked again"),
    LiteratureRange("separate small draft model", ("draft",), "2-2.5x", "Chinchilla 70B, distributed",
                    "Chen et al. 2023, arXiv 2302.01318: abstract",
                    "not checked: no copy of the abstract was found by the searches made"),
    LiteratureRange("distilled draft model", (), "10-45% over the same speculative decoding with an undistilled "
                    "draft", "greedy and sampled, a range of standard benchmarks (target sizes not checked)",
                    "Zhou et al. 2023 (DistillSpec), arXiv 2310.08461: abstract",
                    "10-45% over standard SD, greedy and non-greedy: the arXiv abstract; the version on Google "
                    "Research's page says 20% over five tasks instead"),
    LiteratureRange("Medusa heads", ("medusa",), "over 2.2x (Medusa-1, frozen target), 2.3-3.6x (Medusa-2)",
                    "Vicuna 7B-33B, Zephyr 7B (the heads the authors released)",
                    "Cai et al. 2024 (Medusa), arXiv 2401.10774: abstract; FasterDecoding/Medusa README",
                    "over 2.2x for Medusa-1: the abstract; 2.3-3.6x for Medusa-2: only in summaries of the paper "
                    "(the abstract's copy found was cut before it), not checked in the paper itself"),
    LiteratureRange("EAGLE feature drafter", ("eagle", "adaptive"), "2.7-3.5x latency on LLaMA2-Chat 70B",
                    "Vicuna and LLaMA2-Chat 7B-70B, Mixtral 8x7B Instruct",
                    "Li et al. 2024 (EAGLE), ICML, arXiv 2401.15077: abstract",
                    "2.7x-3.5x latency on LLaMA2-Chat 70B, throughput doubled: the abstract (ICML 2024); its "
                    "hardware is not in the abstract"),
    LiteratureRange("block diffusion drafter", ("dflash",), "over 6x lossless; up to 2.5x EAGLE-3's speedup",
                    "a range of models and tasks (Qwen3 targets among them; hardware not in the abstract)",
                    "Chen, Liang and Liu 2026 (DFlash), ICML, arXiv 2602.06036: abstract",
                    "over 6x lossless acceleration across a range of models and tasks, up to 2.5x higher speedup "
                    "than EAGLE-3: the abstract (v2, camera-ready); the targets and GPUs are not in it"),
    LiteratureRange("retrieval from a datastore", ("retrieval",), "1.62-2.36x on code or text generation",
                    "7B and 13B models, batch 1", "He et al. 2024 (REST), NAACL, arXiv 2311.08252: abstract",
                    "1.62X-2.36X, 7B and 13B models, single batch: the abstract (NAACL 2024 proceedings, ACL "
                    "Anthology); the models' names and hardware are not in it"),
    LiteratureRange("n-grams without a draft model", ("ngram",),
                    "up to 1.8x on MT-bench; 4x on code completion with strong scaling over several GPUs",
                    "n-grams from Jacobi iterations, not from the prompt (target sizes not checked)",
                    "Fu et al. 2024 (Lookahead decoding), ICML, arXiv 2402.02057: abstract",
                    "up to 1.8x on MT-bench and 4x with strong scaling on several GPUs in code completion: the "
                    "abstract (PMLR 235, ICML 2024); models and GPUs are not in it"),
]


@dataclass
class LeaderboardRow:
    """One method's row of Spec-Bench's leaderboard (Vicuna-7B-v1.3, greedy, fp16, batch 1), beside specviz's
    nearest method measured over all 480 Spec-Bench prompts on an H200 (greedy, bf16, batch 1, 256 new tokens):
    its current figure (specviz.measure.figures), or where none is current the host loop's run that names itself
    so."""

    method: str  # as the leaderboard names it
    a100: tuple[float, float]  # (overall speedup, mean accepted tokens) on one A100 80GB
    rtx3090: tuple[float, float]  # the same on one RTX 3090 24GB
    specviz: str | None  # specviz's method entry (bench's METHOD:GAMMA:TREE) of that kind; None: none ships

    @property
    def figure(self) -> Figure | None:
        """specviz's figure for the entry: the current one, else the host loop's (the lookup ngram:8)."""
        if self.specviz is None:
            return None
        return headline(self.specviz) or (HOST_LOOP_NGRAM if self.specviz == HOST_LOOP_NGRAM.method else None)

    @property
    def specviz_h200(self) -> tuple[float, float | None] | None:
        """(speedup, tau) of that figure; tau None where its run did not keep it."""
        return None if self.figure is None else (self.figure.speedup, self.figure.tau)


SPEC_BENCH_SOURCE = ("Spec-Bench's Leaderboard.md (github.com/hemingkx/Spec-Bench, commit fd2c1cd of 2025-04-22): "
                     "'Leaderboard on A100', Vicuna-7B-v1.3, and 'Leaderboard on 3090': the Overall and #Mean "
                     "Accepted Tokens columns, the mean of 3 runs; PyTorch 2.5.1, greedy, FP16, batch 1")
SPEC_BENCH = [
    LeaderboardRow("EAGLE-2", (2.36, 4.34), (2.19, 4.35), "eagle:6:31"),
    LeaderboardRow("Hydra", (2.07, 3.26), (1.91, 3.26), None),
    LeaderboardRow("Medusa", (1.71, 2.31), (1.44, 2.32), "medusa:4"),
    LeaderboardRow("PLD", (1.66, 1.75), (1.64, 1.73), "ngram:8"),
    LeaderboardRow("SpS", (1.52, 2.28), (1.79, 2.28), "draft:4@0.5"),
    LeaderboardRow("REST", (1.48, 1.82), (1.28, 1.63), "retrieval:16:31"),
    LeaderboardRow("Lookahead", (1.34, 1.64), (1.13, 1.64), None),
]


def literature_for(method: str) -> LiteratureRange | None:
    """The first row that names the method (a method with two papers quotes the first)."""
    return next((r for r in LITERATURE if method in r.methods), None)


def literature_lines() -> list[str]:
    """Every row as one line, the kinds specviz does not ship included."""
    return [f"{r.drafter}: {r.speedup}; {r.targets} ({r.source})" for r in LITERATURE]


def spec_bench_lines() -> list[str]:
    """Spec-Bench's rows beside specviz's own, one line each."""
    def ours(row):
        if row.specviz is None:
            return "specviz ships none of this kind"
        f = row.figure
        tau = "" if f.tau is None else f", tau {f.tau:.2f}"
        loop = "host loop" if "host loop" in f.label else "device loop"
        return f"specviz {row.specviz} {f.speedup:.2f}x{tau} (135M target, H200, {loop}, {f.commit})"

    return [f"{r.method}: {r.a100[0]:.2f}x, tau {r.a100[1]:.2f} on an A100; {r.rtx3090[0]:.2f}x, tau "
            f"{r.rtx3090[1]:.2f} on an RTX 3090 (Vicuna-7B); {ours(r)}" for r in SPEC_BENCH]
