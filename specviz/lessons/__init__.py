"""Measurements behind the Learn tab's lessons: small functions, records in and out, no UI imports, so that the
CLI (`python -m specviz learn`), the API and a class notebook can run the same lessons. One module a lesson;
`catalogue` numbers them and says how each record becomes a table and a sentence.

Each lesson is a generator that yields its record as it grows (the last one yielded is the lesson's result):
a caller can draw progress and stop between two yields by closing the generator. `finish` runs one to its end.

    from specviz import lessons, load_model
    target = load_model("default")
    result = lessons.finish(lessons.distribution(target, "Once upon a time, there was a", runs=100))
    result.p_value, result.wrong_p_value

Every number comes from the model when the lesson runs; only LITERATURE is quoted, and says where from.
"""
from ..api import make_proposer
from ..measure.cost_curve import CostPoint
from ..measure.floor import weight_bytes
from ..rule.theory import expected_speedup
from .speedup import AcceptanceRow, acceptance, acceptance_rows, acceptance_sentence, expected_curve
from .batch_size import BatchSizes, batch_rows, batch_sentence, batch_sizes
from .catalogue import LESSONS, SETTINGS, Lesson, lessons_to_run, register, unregister
from .common import PROMPTS, finish
from .drafters import (DrafterCost, drafter_costs, drafter_rows, drafter_sentence, extra_bytes, extra_parameters,
                       offline_methods)
from .exactness import (SIGNIFICANCE, Distribution, Histogram, SideBySide, Unchanged, distribution,
                        distribution_sentence, greedy_side_by_side, second_token_probs, side_by_side_sentence,
                        two_sample_test, unchanged)
from .literature import (LITERATURE, SPEC_BENCH, SPEC_BENCH_SOURCE, LiteratureRange, literature_for, literature_lines,
                         spec_bench_lines)
from .steps import Mechanic, MechanicStep, mechanic, mechanic_rows, mechanic_sentence, mechanic_step
from .forward_cost import VerifyCost, verify_cost, verify_cost_rows, verify_cost_sentence

__all__ = [
    "AcceptanceRow",
    "BatchSizes",
    "CostPoint",
    "Distribution",
    "DrafterCost",
    "Histogram",
    "LESSONS",
    "LITERATURE",
    "Lesson",
    "LiteratureRange",
    "Mechanic",
    "MechanicStep",
    "PROMPTS",
    "SETTINGS",
    "SIGNIFICANCE",
    "SideBySide",
    "Unchanged",
    "VerifyCost",
    "acceptance",
    "acceptance_rows",
    "acceptance_sentence",
    "batch_rows",
    "batch_sentence",
    "batch_sizes",
    "distribution",
    "distribution_sentence",
    "drafter_costs",
    "drafter_rows",
    "drafter_sentence",
    "expected_curve",
    "expected_speedup",
    "extra_bytes",
    "extra_parameters",
    "finish",
    "greedy_side_by_side",
    "lessons_to_run",
    "register",
    "unregister",
    "literature_for",
    "literature_lines",
    "SPEC_BENCH",
    "SPEC_BENCH_SOURCE",
    "spec_bench_lines",
    "make_proposer",
    "mechanic",
    "mechanic_rows",
    "mechanic_sentence",
    "mechanic_step",
    "offline_methods",
    "second_token_probs",
    "side_by_side_sentence",
    "two_sample_test",
    "unchanged",
    "verify_cost",
    "verify_cost_rows",
    "verify_cost_sentence",
    "weight_bytes",
]
