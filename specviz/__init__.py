"""specviz: real speculative decoding, step by step, observable and exact.

The names below import on first use (PEP 562): `import specviz` alone, or `python -m specviz --help`, does not
load torch and transformers, so the command line checks its arguments in a fraction of a second."""
from importlib import import_module

__version__ = "0.1.0"

_HOMES = {
    "Report": "api",
    "encode": "api",
    "first_difference": "api",
    "generate": "api",
    "make_proposer": "api",
    "run_once": "api",
    "SpeculativeRun": "engine.run",
    "DrafterMismatchError": "errors",
    "InvalidSettingError": "errors",
    "ModelLoadError": "errors",
    "NotCausalLMError": "errors",
    "OfflineError": "errors",
    "SpecvizError": "errors",
    "VocabularyMismatchError": "errors",
    "DEFAULT_MODEL": "models.loading",
    "LoadedModel": "models.loading",
    "load_model": "models.loading",
    "EngineOptions": "options",
    "METHODS": "methods",
    "DraftPosition": "records.schema",
    "RunMetrics": "records.schema",
    "RunResult": "records.schema",
    "StepRecord": "records.schema",
    "TokenKind": "records.schema",
    "TokenRecord": "records.schema",
    "TopTokens": "records.schema",
    "DecodeSettings": "settings",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
