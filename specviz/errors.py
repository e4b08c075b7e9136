"""Exceptions the library raises for bad input. The command line turns each into one line on stderr, exit 2."""


class SpecvizError(Exception):
    """Base class: something the user asked for cannot be done; the message says what to do instead."""


class InvalidSettingError(SpecvizError, ValueError):
    """A decoding setting (gamma, temperature, top-p, ...) or the prompt is out of range."""


class MissingDrafterError(InvalidSettingError):
    """The draft method was asked for without a draft model (api.check_drafter)."""


class ModelLoadError(SpecvizError):
    """A target or drafter could not be loaded."""


class OfflineError(ModelLoadError):
    """A Hub id was given but the Hugging Face Hub cannot be reached."""


class NotCausalLMError(ModelLoadError):
    """The model is not a causal (decoder-only) language model."""


class VocabularyMismatchError(ModelLoadError):
    """A drafter does not share the target's vocabulary."""


class DrafterMismatchError(ModelLoadError):
    """Trained drafter heads (Medusa, EAGLE) were made for another target (hidden size or vocabulary)."""


def message_of(error: Exception) -> str:
    """What a person is shown for an error: the message of a SpecvizError (their request), a fixed sentence for
    anything else (the server's fault, logged there with its traceback)."""
    if isinstance(error, SpecvizError):
        return str(error)
    return ("Something went wrong on the server and this request was not finished. Try again, or choose other "
            "settings.")
