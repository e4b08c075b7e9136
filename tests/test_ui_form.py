"""The boundary (specviz/ui/form.py): one function reads a request's values into one Form; a bad value gets a
message naming its field; the public profile narrows what the local one takes."""
import math

import pytest

from specviz.errors import InvalidSettingError
from specviz.public import Profile
from specviz.ui.form import Form, message_of, read_form

PUBLIC = Profile(public=True, memory_budget=12 << 30, max_prompt_chars=4000)


@pytest.mark.quick
def test_widget_values_become_one_form_with_its_settings():
    form = read_form({"prompt": "hi", "method": "draft", "target": " default ", "draft": "none", "gamma": 4.0,
                      "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 96.0, "seed": None, "tree": 0,
                      "draft_stop": 0.5, "compare_plain": True, "step_mode": False})
    assert isinstance(form, Form) and form.target == "default" and form.draft is None
    assert form.settings.max_new_tokens == 96 and form.settings.gamma == 4 and form.settings.seed is None
    assert isinstance(form.settings.max_new_tokens, int)


@pytest.mark.quick
@pytest.mark.parametrize("values, field", [
    ({"max_new_tokens": True}, "max new tokens"), ({"seed": 10 ** 30}, "seed"), ({"gamma": math.nan}, "gamma"),
    ({"prompt": "hi \ud800"}, "prompt"), ({"prompt": "a\x00b"}, "prompt"), ({"top_p": "1"}, "top-p"),
    ({"compare_plain": 1}, "plain"), ({"methods": "ngram"}, "methods"), ({"method": "nope"}, "method"),
    ({"max_new_tokens": 513}, "max new tokens"), ({"nonsense": 1}, "nonsense"),
])
def test_a_bad_value_is_refused_with_its_field_named(values, field):
    with pytest.raises(InvalidSettingError) as refused:
        read_form(values)
    assert field in str(refused.value)


@pytest.mark.quick
def test_the_public_profile_narrows_prompts_and_models():
    long_prompt = {"prompt": "word " * 1000}
    assert read_form(long_prompt).prompt  # control: a local user may send it
    with pytest.raises(InvalidSettingError, match="at most 4,000"):
        read_form(long_prompt, PUBLIC)
    assert read_form({"draft": "/tmp/model.gguf"}).draft == "/tmp/model.gguf"
    with pytest.raises(Exception, match="does not offer that drafter"):
        read_form({"draft": "/tmp/model.gguf"}, PUBLIC)


@pytest.mark.quick
def test_only_a_request_s_mistake_is_shown_as_it_is():
    assert "seed" in message_of(InvalidSettingError("seed must be ..."))
    shown = message_of(KeyError("/srv/secret/path"))
    assert "secret" not in shown and "went wrong on the server" in shown
