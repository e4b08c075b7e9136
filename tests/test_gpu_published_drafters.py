"""scripts/gpu_published_drafters.py end to end at the tiny shapes on the CPU: the published layouts (EAGLE-3's too) are
written, load, bench against plain decoding with outputs identical to it, and the drafting cost c of each
is reported beside the plain speed (the tool run in this process)."""
import json

from command_line import run_script


def test_the_script_reports_c_for_eagle_and_medusa(tmp_path):
    out = tmp_path / "out"
    proc = run_script("gpu_published_drafters", "--shape", "tiny", "--device", "cpu", "--out", out,
                      "--work", tmp_path / "work", "--max-new-tokens", "10", "--prompts", "1", "--prompt-words", "12")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "published_drafters.json").read_text())
    assert result["target"] == "random:llama-tiny,kv_heads=4" and result["plain_tokens_per_second"] > 0
    assert set(result["files"]) == {"eagle/config.json", "eagle/pytorch_model.bin", "medusa/config.json",
                                    "medusa/medusa_lm_head.pt"}
    for method in ("eagle", "medusa"):
        figures = result["methods"][method]
        assert figures["identical_share"] == 1.0
        assert figures["c"] > 0 and figures["c"] == figures["draft_ms_per_step"] / figures["plain_forward_ms"]
        assert (out / f"bench_{method}.json").is_file()


def test_the_script_reports_an_eagle3_depth_beside_the_verify_pass(tmp_path):
    out = tmp_path / "out"
    proc = run_script("gpu_published_drafters", "--shape", "tiny-deep", "--methods", "eagle3", "--gamma", "3",
                      "--device", "cpu", "--out", out, "--work", tmp_path / "work", "--max-new-tokens", "8",
                      "--prompts", "1", "--prompt-words", "12")
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads((out / "published_drafters.json").read_text())["methods"]["eagle3"]
    assert set(json.loads((out / "published_drafters.json").read_text())["files"]) == {"eagle3/config.json",
                                                                                       "eagle3/pytorch_model.bin"}
    assert figures["identical_share"] == 1.0
    assert figures["draft_ms_per_depth"] == figures["draft_ms_per_step"] / 3 and figures["c_over_verify"] > 0
