"""Fairness in the public profile, against the served app: one client address floods the queue from several
sessions (quick joins, far more than its share), another address asks one run, and that run is answered with
its result while the flood is refused at the door with a message (ui/admission.py)."""
from __future__ import annotations

import concurrent.futures

import pytest
from gradio_client import Client

from specviz.service.public import profile_from_env
from specviz.service import serving
from ui_server import serve_app

pytestmark = pytest.mark.server  # its own server, in a profile of its own
PER_CLIENT = 4
RUN = dict(prompt="Say hello.", method="ngram", max_new_tokens=16, gamma=4, temperature=0.0, seed=0,
           api_name="/speculate")


@pytest.fixture(scope="module")
def public_url():
    # behind a Space's proxy the address is the last X-Forwarded-For entry (SPACE_ID makes the profile trust it)
    public = profile_from_env({"SPECVIZ_PUBLIC": "1", "SPACE_ID": "owner/specviz",
                               "SPECVIZ_PER_CLIENT": str(PER_CLIENT)})
    with serving.served_as(public), serve_app() as url:
        yield url


def client_from(url: str, address: str) -> Client:
    return Client(url, verbose=False, headers={"X-Forwarded-For": address})


def outcome(job) -> str:
    try:
        return "answered" if job.result(timeout=600)["text"] else "empty"
    except Exception as error:  # a refusal: HTTP 429 at the join, its detail the sentence a browser shows
        response = getattr(error, "response", None)
        detail = response.json().get("detail", "") if response is not None and response.status_code == 429 else ""
        if "already have a run" in detail or "Too many runs" in detail:
            return "refused"
        return f"error: {error}"


def test_a_flood_from_one_address_does_not_starve_another(public_url):
    flooders = [client_from(public_url, "10.0.0.1") for _ in range(4)]
    flood = [client.submit(**RUN) for _ in range(10) for client in flooders]  # 40 quick joins
    other = client_from(public_url, "10.0.0.2").submit(**dict(RUN, prompt="Name three colours."))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        flood_outcomes = list(pool.map(outcome, flood))
    assert outcome(other) == "answered"
    assert set(flood_outcomes) <= {"answered", "refused"}, flood_outcomes
    # no more than its share got in while the flood was arriving (each answered run frees a place)
    assert flood_outcomes.count("refused") >= len(flood) - 2 * PER_CLIENT, flood_outcomes
    assert flood_outcomes.count("answered") >= 1


def test_one_session_has_two_places(public_url):
    client = client_from(public_url, "10.0.0.3")
    jobs = [client.submit(**RUN) for _ in range(6)]
    outcomes = [outcome(job) for job in jobs]
    assert outcomes.count("answered") >= 1 and outcomes.count("refused") >= 3, outcomes
