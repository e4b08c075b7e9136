"""One table of bounds (specviz.settings.BOUNDS) read by the page's sliders, the API's boundary and the command
line: a value one of them takes is taken by the others, one out of range is refused by each with its range."""
import pytest

from specviz.errors import InvalidSettingError
from specviz.settings import BOUNDS, DecodeSettings
from specviz.ui.form import read_form
from specviz.service.public import Profile, profile_from_env

from command_line import run_cli

pytestmark = pytest.mark.quick
PUBLIC = profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=16 << 30)


def test_the_api_and_the_command_line_take_the_table_s_ends_and_refuse_past_them():
    for name, api in (("gamma", "gamma"), ("tree", "draft tree"), ("temperature", "temperature")):
        bound = BOUNDS[name]
        high = bound.top()
        assert getattr(read_form({name: high}).settings, name) == high  # the end itself is taken
        assert getattr(DecodeSettings(**{name: high}).validate(), name) == high
        past = high + 1
        with pytest.raises(InvalidSettingError, match=f"{api} must be between {bound.low:g} and {high:g}"):
            read_form({name: past})
        with pytest.raises(InvalidSettingError, match="between"):
            DecodeSettings(**{name: past}).validate()


def test_a_public_server_s_tree_ends_where_its_slider_does_and_a_local_one_does_not():
    assert BOUNDS["tree"].top(public=True) == 64 < BOUNDS["tree"].top()
    with pytest.raises(InvalidSettingError, match="draft tree must be between 0 and 64, got 65"):
        read_form({"tree": 65}, PUBLIC)
    assert read_form({"tree": 65}, Profile()).settings.tree == 65  # the control: a local server takes it


def test_the_command_line_refuses_out_of_range_values_with_the_range():
    for args, message in ((["--gamma", "1000"], "gamma must be between 1 and 32, got 1000"),
                          (["--temperature", "5"], "temperature must be between 0 and 2"),
                          (["--gamma", "0"], "gamma must be between 1 and 32, got 0")):
        done = run_cli("generate", "--prompt", "hi", *args)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_the_range_is_said_in_words_for_each_place():
    assert BOUNDS["max_new_tokens"].range_text() == "between 1 and 512"
    assert BOUNDS["max_new_tokens"].range_text(app=False) == "at least 1"  # the command line has no end
    assert BOUNDS["tree"].range_text(public=True) == "between 0 and 64"
