"""specviz: real speculative decoding, step by step, observable and exact."""
from .api import Report, encode, first_difference, generate, make_proposer, run_once
from .engine import SpeculativeRun
from .errors import (DrafterMismatchError, InvalidSettingError, ModelLoadError, NotCausalLMError, OfflineError,
                     SpecvizError, VocabularyMismatchError)
from .models import DEFAULT_MODEL, LoadedModel, load_model
from .options import EngineOptions
from .proposers import METHODS
from .records import DraftPosition, RunMetrics, RunResult, StepRecord, TokenKind, TokenRecord, TopTokens
from .settings import DecodeSettings

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL", "METHODS", "DecodeSettings", "DrafterMismatchError", "DraftPosition", "EngineOptions",
    "InvalidSettingError", "LoadedModel", "ModelLoadError", "NotCausalLMError", "OfflineError", "Report", "RunMetrics",
    "RunResult", "SpecvizError", "SpeculativeRun", "StepRecord", "TokenKind", "TokenRecord", "TopTokens",
    "VocabularyMismatchError", "encode", "first_difference", "generate", "load_model", "make_proposer", "run_once",
]
