"""The served app asked for a model too large for the memory it has: it answers with the need and what is free,
and stays up for the next request. The app served in this process (conftest.py), driven with gradio_client."""
import pytest
from gradio_client import Client

PROMPT = "Repeat: red green blue red green blue."


def test_a_model_too_large_is_refused_and_the_server_stays_up(app_url, monkeypatch, capfd):
    monkeypatch.setenv("SPECVIZ_MEMORY_AVAILABLE", "2GiB")  # the server reads what is free at each load
    client = Client(app_url, verbose=False)
    with pytest.raises(Exception,
                       match=r"random:llama-8b needs about \d+\.\d GiB .* 2\.0 GiB is SPECVIZ_MEMORY_AVAILABLE"):
        client.predict(prompt=PROMPT, method="ngram", target="random:llama-8b", max_new_tokens=8,
                       api_name="/speculate")
    # the control: the same server, the same figure, a model that fits
    report = client.predict(prompt=PROMPT, method="ngram", max_new_tokens=8, gamma=3, temperature=0.0,
                            api_name="/speculate")
    assert report["text"] and report["metrics"]["new_tokens"] > 0
    assert "Traceback" not in capfd.readouterr().err  # a refusal, not the server's error
