"""The boundary (specviz/ui/form.py): one function reads a request's values into one Form; a bad value gets a
message naming its field; the public profile narrows what the local one takes."""
import math

import pytest

from specviz.errors import InvalidSettingError, message_of
from specviz.service.public import Profile, profile_from_env
from specviz.ui.form import Form, read_form

PUBLIC = Profile(public=True, memory_budget=12 << 30, max_prompt_chars=4000)


def test_widget_values_become_one_form_with_its_settings():
    form = read_form({"prompt": "hi", "method": "draft", "target": " default ", "draft": "none", "gamma": 4.0,
                      "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 96.0, "seed": None, "tree": 0,
                      "draft_stop": 0.5, "compare_plain": True, "step_mode": False})
    assert isinstance(form, Form) and form.target == "default" and form.draft is None
    assert form.settings.max_new_tokens == 96 and form.settings.gamma == 4 and form.settings.seed is None
    assert isinstance(form.settings.max_new_tokens, int)


def test_a_bad_value_is_refused_with_its_field_named():
    for values, field in [
        ({"max_new_tokens": True}, "max new tokens"), ({"seed": 10 ** 30}, "seed"), ({"gamma": math.nan}, "gamma"),
        ({"prompt": "hi \ud800"}, "prompt"), ({"prompt": "a\x00b"}, "prompt"), ({"top_p": "1"}, "top-p"),
        ({"compare_plain": 1}, "plain"), ({"methods": "ngram"}, "methods"), ({"method": "nope"}, "method"),
        ({"max_new_tokens": 513}, "max new tokens"), ({"nonsense": 1}, "nonsense"),
    ]:
        with pytest.raises(InvalidSettingError) as refused:
            read_form(values)
        assert field in str(refused.value), values


def test_the_public_profile_narrows_prompts_and_models():
    long_prompt = {"prompt": "word " * 1000}
    assert read_form(long_prompt).prompt  # control: a local user may send it
    with pytest.raises(InvalidSettingError, match="at most 4,000"):
        read_form(long_prompt, PUBLIC)
    assert read_form({"draft": "/tmp/model.gguf"}).draft == "/tmp/model.gguf"
    with pytest.raises(Exception, match="does not offer that drafter"):
        read_form({"draft": "/tmp/model.gguf"}, PUBLIC)


def test_only_a_request_s_mistake_is_shown_as_it_is():
    assert "seed" in message_of(InvalidSettingError("seed must be ..."))
    shown = message_of(KeyError("/srv/secret/path"))
    assert "secret" not in shown and "went wrong on the server" in shown


def test_a_tiny_temperature_is_refused_before_the_sampler():
    """1e-300 divides the logits into inf and the sampler's probabilities into NaN: refused at the boundary,
    locally too, with what to send instead."""
    for tiny in (1e-300, 5e-324, 0.001):
        with pytest.raises(InvalidSettingError, match="temperature must be 0 \\(greedy\\) or at least 0.01"):
            read_form({"temperature": tiny})
    assert read_form({"temperature": 0.01}).settings.temperature == 0.01  # control: the smallest taken
    assert read_form({"temperature": 0}).settings.greedy


def test_every_profile_takes_temperatures_up_to_the_slider_s_end():
    """The page's slider ends at 2 (specviz.settings.BOUNDS); the API took 5 from a local user, which the page could
    not send: one end for both now, and for the command line."""
    public = profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=16 << 30)
    for profile in (public, Profile()):
        assert read_form({"temperature": 2.0}, profile).settings.temperature == 2.0  # control: the end is taken
        with pytest.raises(InvalidSettingError, match="temperature must be between 0 and 2, got 5"):
            read_form({"temperature": 5}, profile)


def test_a_drafter_given_as_the_target_is_named_as_one():
    for profile in (Profile(), PUBLIC):
        with pytest.raises(InvalidSettingError, match="'distilled' is a drafter .* not a target"):
            read_form({"target": "distilled"}, profile)
    assert read_form({"draft": "distilled"}, PUBLIC).draft == "distilled"  # control: as the drafter it is taken
