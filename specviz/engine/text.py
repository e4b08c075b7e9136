"""Token ids to text without breaking multi-byte characters: decode a short window of the growing sequence
and take the new suffix. A token that ends inside a character shows as "" and the token that completes
the character carries all of it, so the token texts always join up to the decoded output."""
from __future__ import annotations

_CONTEXT = 6  # tokens decoded before the new ones, so that leading spaces and merges come out right


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.read = 0  # ids[:read] are already turned into text
        self.special_ids = set(getattr(tokenizer, "all_special_ids", None) or ())
        self._before = (-1, "")  # (read, the text of the context before ids[read:]): peeks share it

    def _text_before(self) -> str:
        """The decoded context before ids[read:]: ids[:read] never change, so it is decoded once per read."""
        if self._before[0] != self.read:
            self._before = (self.read, self.decode(self.ids[max(0, self.read - _CONTEXT):self.read]))
        return self._before[1]

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:  # tiny test models without a tokenizer
            return "".join(f"<{i}>" for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _new_text(self, ids: list[int]) -> str | None:
        """Text that ids[self.read:] add after ids[:self.read]; None while a character is incomplete."""
        before, after = self._text_before(), self.decode(ids[max(0, self.read - _CONTEXT):])
        if after.endswith("\ufffd"):
            return None
        return after[len(before):] if after.startswith(before) else after

    def peek(self, token_id: int) -> str:
        """Text the token would add, without adding it (for rejected draft tokens). A special token, which adds
        no text to the output, shows by its name ("<|im_end|>"): a rejected draft of it is still seen."""
        if token_id in self.special_ids:
            return self.tokenizer.convert_ids_to_tokens(token_id)
        text = self._new_text(self.ids + [token_id])
        return self.decode([token_id]) if text is None else text

    def flush(self) -> str:
        """Text still held back at the end (an incomplete character shows as the replacement character)."""
        start = max(0, self.read - _CONTEXT)
        before, after = self.decode(self.ids[start:self.read]), self.decode(self.ids[start:])
        self.read = len(self.ids)
        return after[len(before):] if after.startswith(before) else ""

    def push(self, token_id: int) -> str:
        """Add the token; return the text it adds."""
        self.ids.append(token_id)
        text = self._new_text(self.ids)
        if text is None:
            return ""
        self.read = len(self.ids)
        return text
