"""The public profile's rules (specviz/service/public.py): when it is on, which models it offers, what a model needs,
which models make room, who may queue. Pure functions: no server, no model loaded."""
import pytest

from specviz.errors import SpecvizError
from specviz.service.public import (GiB, MemoryBudgetError, NotOfferedError, PRESETS, Profile, admission_refusal,
    budget_for, budget_refusal, check_model, check_prompt_tokens, client_address, evictions, host_memory, is_public,
    needed_bytes, parameters, parse_bytes, preset_bytes, profile_from_env, replay_refusal)

PUBLIC = profile_from_env({"SPECVIZ_PUBLIC": "1", "SPECVIZ_MEMORY_BUDGET": "12GiB"})
LOCAL = profile_from_env({})
REFUSED = ["random:llama-8b", "random:llama-tiny", "/etc", "/etc/passwd", "/nonexistent/folder", "../assets",
           "~/models/x.gguf", "C:\\models", "some-org/some-model", "gpt2", "assets/drafters/model.safetensors",
           "http://example.com/model.gguf", "org/name/../../etc"]


# -- when the profile is on ---------------------------------------------------------------------------------------

ENVIRONMENTS = [
    ({}, False),
    ({"SPACE_ID": "someone/specviz"}, True),
    ({"SPECVIZ_PUBLIC": "1"}, True),
    ({"SPECVIZ_PUBLIC": "yes"}, True),
    ({"SPACE_ID": "someone/specviz", "SPECVIZ_PUBLIC": "0"}, False),  # the owner's explicit choice wins
    ({"SPECVIZ_PUBLIC": ""}, False),
]


@pytest.mark.quick
def test_the_profile_is_on_on_a_space_or_when_asked():
    for env, public in ENVIRONMENTS:
        assert is_public(env) is public, env
        assert profile_from_env(env, device_memory=16 * GiB).public is public, env


def test_a_local_profile_has_no_limits():
    assert LOCAL == Profile()
    assert LOCAL.memory_budget is None and LOCAL.per_session is None and LOCAL.run_seconds is None


def test_the_settings_are_read_from_the_environment():
    profile = profile_from_env({"SPACE_ID": "x/y", "SPECVIZ_ALLOW_MODELS": " org/a , org/b,,",
                                "SPECVIZ_MEMORY_BUDGET": "800MiB", "SPECVIZ_PER_SESSION": "1",
                                "SPECVIZ_PER_CLIENT": "0", "SPECVIZ_RUN_SECONDS": "30"})
    assert profile.extra_models == {"org/a", "org/b"}
    assert profile.memory_budget == 800 * 2 ** 20
    assert profile.per_session == 1 and profile.per_client is None  # 0: no limit
    assert profile.run_seconds == 30 and profile.trust_forwarded_for  # behind the Space's proxy
    assert profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=16 * GiB).memory_budget == 13 * GiB


@pytest.mark.quick
def test_sizes_are_read_with_their_unit_and_nonsense_is_refused():
    for text, expected in [("12GiB", 12 * GiB), ("12 GB", 12 * 10 ** 9), ("800MiB", 800 * 2 ** 20),
                           ("1500000000", 1_500_000_000), ("1.5gib", int(1.5 * GiB))]:
        assert parse_bytes(text) == expected, text
    for bad in ["twelve", "12XB", "-1GB", ""]:
        with pytest.raises(Exception, match="is not a size"):
            parse_bytes(bad)


def test_a_bad_limit_is_refused_with_its_name():
    with pytest.raises(Exception, match="SPECVIZ_PER_SESSION"):
        profile_from_env({"SPECVIZ_PUBLIC": "1", "SPECVIZ_PER_SESSION": "two", "SPECVIZ_MEMORY_BUDGET": "1GB"})


def test_the_budget_leaves_a_reserve_and_reads_a_containers_limit(tmp_path):
    assert budget_for(16 * GiB) == 13 * GiB
    assert budget_for(2 * GiB) == GiB // 2  # a quarter at least
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/memory.max").write_text(f"{16 * GiB}\n")
    assert host_memory(tmp_path) == 16 * GiB
    (tmp_path / "sys/fs/cgroup/memory.max").write_text("max\n")  # no limit of its own: the machine's
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       24000000 kB\n")
    assert host_memory(tmp_path) == 24000000 * 1024


# -- which models -------------------------------------------------------------------------------------------------

@pytest.mark.quick
def test_random_shapes_paths_and_unknown_ids_are_refused_alike_in_public():
    for name in REFUSED:
        with pytest.raises(NotOfferedError) as refused:
            check_model(name, PUBLIC, "target model")
        # one line, the same for every name: it names no path and tells nothing of what exists
        assert str(refused.value) == "this public server does not offer that target model: choose one from the list"


@pytest.mark.quick
def test_a_local_user_may_name_any_model():
    for name in REFUSED:
        check_model(name, LOCAL, "target model")  # control: nothing refused


@pytest.mark.quick
def test_the_default_the_shipped_drafter_and_presets_that_fit_are_offered():
    for name in ["default", "distilled", "HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct",
                 "Qwen/Qwen2.5-0.5B-Instruct"]:
        check_model(name, PUBLIC)


@pytest.mark.quick
def test_presets_that_do_not_fit_are_not_offered():
    cpu_space = profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=16 * GiB, dtype_bytes=4)  # float32
    assert not cpu_space.offers("Qwen/Qwen2.5-7B-Instruct") and not cpu_space.offers("meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(NotOfferedError):
        check_model("Qwen/Qwen2.5-7B-Instruct", cpu_space)
    gpu = profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=80 * GiB, dtype_bytes=2)  # bfloat16
    assert gpu.offers("Qwen/Qwen2.5-7B-Instruct") and gpu.offers("meta-llama/Llama-3.1-8B-Instruct")


def test_the_owner_adds_models():
    profile = profile_from_env({"SPECVIZ_PUBLIC": "1", "SPECVIZ_ALLOW_MODELS": "some-org/some-model",
                                "SPECVIZ_MEMORY_BUDGET": "12GiB"})
    check_model("some-org/some-model", profile)
    with pytest.raises(NotOfferedError):
        check_model("some-org/other-model", profile)


# -- what a model needs -------------------------------------------------------------------------------------------

def _config(name):
    from transformers import LlamaConfig, Qwen2Config

    s = PRESETS[name]
    kind = Qwen2Config if name.startswith("Qwen/") else LlamaConfig
    return kind(hidden_size=s["hidden"], intermediate_size=s["intermediate"], num_hidden_layers=s["layers"],
                num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], vocab_size=s["vocab"],
                tie_word_embeddings=s["tied"])


@pytest.mark.parametrize("name", ["HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                                  "meta-llama/Llama-3.2-1B-Instruct"])
def test_parameters_match_transformers_own_count(name):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(name))
    assert parameters(PRESETS[name]) == sum(p.numel() for p in model.parameters())


def test_a_7b_model_needs_more_than_a_free_cpu_space_has():
    need = preset_bytes(["Qwen/Qwen2.5-7B-Instruct"], 4)
    assert 28 * GiB < need < 40 * GiB  # 7.6 billion float32 parameters and their caches
    small = needed_bytes(parameters(PRESETS["default"]), 4, PRESETS["default"])
    assert small < 2 * GiB


# -- which models make room ---------------------------------------------------------------------------------------

LOADED = [("a", 3 * GiB), ("b", 3 * GiB), ("c", 3 * GiB)]  # least recently used first


@pytest.mark.quick
def test_the_least_recently_used_go_first_and_only_as_many_as_needed():
    assert evictions(LOADED, set(), 2 * GiB, 10 * GiB) == ["a"]
    assert evictions(LOADED, set(), 5 * GiB, 10 * GiB) == ["a", "b"]
    assert evictions(LOADED, set(), 1 * GiB, 10 * GiB) == []  # fits as it is


def test_models_in_use_or_kept_stay():
    assert evictions(LOADED, {"a"}, 2 * GiB, 10 * GiB) == ["b"]
    assert evictions(LOADED, set(), 2 * GiB, 10 * GiB, keep=frozenset({"a"})) == ["b"]


@pytest.mark.quick
def test_a_model_larger_than_the_budget_is_refused_before_loading():
    with pytest.raises(MemoryBudgetError, match="needs about 20.0 GiB"):
        evictions([], set(), 20 * GiB, 10 * GiB)


def test_a_model_that_fits_only_if_a_running_one_goes_must_wait():
    with pytest.raises(MemoryBudgetError, match="try again"):
        evictions(LOADED, {"a", "b", "c"}, 2 * GiB, 10 * GiB)


@pytest.mark.quick
def test_without_a_budget_every_unused_model_goes_as_the_app_always_did():
    assert evictions(LOADED, {"b"}, 100 * GiB, None) == ["a", "c"]  # control: no budget, no refusal


# -- who may queue ------------------------------------------------------------------------------------------------

@pytest.mark.quick
def test_a_session_and_a_client_get_a_share():
    profile = Profile(public=True, per_session=2, per_client=3)
    assert admission_refusal(1, 1, profile) is None
    assert "this page" in admission_refusal(2, 2, profile)
    assert "your network" in admission_refusal(0, 3, profile)
    assert admission_refusal(100, 100, LOCAL) is None  # control: no limits locally


def test_the_forwarded_address_counts_only_behind_a_trusted_proxy():
    space = Profile(public=True, trust_forwarded_for=True)
    assert client_address("10.0.0.1", "203.0.113.7", space) == "203.0.113.7"
    assert client_address("10.0.0.1", "203.0.113.7", Profile(public=True)) == "10.0.0.1"


@pytest.mark.quick
def test_the_address_is_the_entry_the_proxy_appended_not_a_forged_first_one():
    """A client writes what it likes in X-Forwarded-For; the Space's proxy appends the address it was reached
    from. Forty requests, each with a new forged first entry, are one address."""
    space = Profile(public=True, trust_forwarded_for=True)
    forged = {client_address("10.0.0.1", f"192.0.2.{i}, 198.51.100.{i % 7}, 203.0.113.7", space) for i in range(40)}
    assert forged == {"203.0.113.7"}
    # control: the first entry would have made them forty addresses, each with its own share
    assert len({f"192.0.2.{i}, 203.0.113.7".split(",")[0] for i in range(40)}) == 40
    assert client_address("10.0.0.1", " , ", space) == "10.0.0.1"  # an empty entry: the connection's peer


@pytest.mark.quick
def test_a_budget_of_engine_seconds_refuses_only_while_others_wait():
    profile = profile_from_env({"SPECVIZ_PUBLIC": "1"}, device_memory=16 * GiB)
    assert (profile.client_seconds, profile.client_window) == (300, 600)
    refused = budget_refusal(301, True, profile)
    assert "used its share" in refused and "301 s" in refused and "10 minutes" in refused
    assert budget_refusal(299, True, profile) is None  # within its budget
    assert budget_refusal(10_000, False, profile) is None  # alone on the server: all of it
    assert budget_refusal(10_000, True, LOCAL) is None  # control: no budget locally
    assert profile_from_env({"SPECVIZ_PUBLIC": "1", "SPECVIZ_CLIENT_SECONDS": "0"},
                            device_memory=16 * GiB).client_seconds is None


@pytest.mark.quick
def test_one_replay_a_page_and_a_few_on_the_server():
    assert replay_refusal(0, 3, 8) is None
    assert "already going in this page" in replay_refusal(1, 1, 8)
    assert "Too many replays" in replay_refusal(0, 8, 8)


@pytest.mark.quick
def test_prompts_are_limited_in_tokens_in_public():
    assert PUBLIC.max_prompt_tokens == 1024 and LOCAL.max_prompt_tokens is None
    check_prompt_tokens(1024, PUBLIC)
    with pytest.raises(SpecvizError, match="1,025 tokens long; this server takes at most 1,024 tokens"):
        check_prompt_tokens(1025, PUBLIC)
    check_prompt_tokens(10 ** 6, LOCAL)  # control: a local user's prompt is as long as the model takes
