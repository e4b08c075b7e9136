"""Token texts (text.py): every token's text, multi-byte characters held back until complete, and special
tokens shown by their names when drafted and rejected."""
from specviz.engine.text import IncrementalDetokenizer


def test_a_rejected_special_token_shows_by_its_name(default_target):
    tokenizer = default_target.tokenizer
    detokenizer = IncrementalDetokenizer(tokenizer)
    for token_id in tokenizer.encode("The cat sat"):
        detokenizer.push(token_id)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert detokenizer.peek(end) == "<|im_end|>"
    assert detokenizer.decode([end]) == ""  # in the output it adds no text: the token texts still join up
    assert detokenizer.peek(tokenizer.encode(" on")[0]) == " on"  # an ordinary token: the text it adds
