"""The app as an MCP server (specviz/ui/mcp.py): with --mcp, /speculate and /distribution are tools an assistant
lists and calls over HTTP at /gradio_api/mcp/; without it (and on a public server unless its owner sets
SPECVIZ_MCP=1) there is no MCP endpoint, whatever gradio's own GRADIO_MCP_SERVER says."""
import ast
import contextlib
import json

import httpx
import pytest

from specviz.ui.mcp import mcp_wanted

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.quick
def test_mcp_is_off_unless_asked_for_and_on_a_public_server_only_by_its_owner():
    assert not mcp_wanted(False, public=False, environ={})
    assert mcp_wanted(True, public=False, environ={})
    assert mcp_wanted(False, public=False, environ={"SPECVIZ_MCP": "1"})
    assert not mcp_wanted(True, public=True, environ={})  # a flag in a Space's start command is not the owner's
    assert not mcp_wanted(False, public=True, environ={"GRADIO_MCP_SERVER": "true"})
    assert mcp_wanted(False, public=True, environ={"SPECVIZ_MCP": "1"})
    assert not mcp_wanted(True, public=True, environ={"SPECVIZ_MCP": "0"})


@contextlib.contextmanager
def served(mcp: bool):
    from specviz.ui.app import build_demo, launch

    demo = build_demo()
    _, url, _ = launch(demo, mcp=mcp, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield url.rstrip("/")
    finally:
        demo.close()


def rpc(url: str, method: str, params: dict | None = None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return httpx.post(f"{url}/gradio_api/mcp/", headers=HEADERS, json=body, timeout=600)


def result_of(response: httpx.Response) -> dict:
    """The JSON-RPC result of a reply sent as JSON or as server-sent events."""
    assert response.status_code == 200, response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    else:
        message = response.json()
    assert "error" not in message, message
    return message["result"]


@pytest.mark.server
def test_an_assistant_lists_and_calls_speculate_over_http(monkeypatch):
    pytest.importorskip("mcp", reason="MCP needs gradio's mcp extra: pip install -r requirements-mcp.txt")
    with served(mcp=True) as url:
        tools = {tool["name"]: tool for tool in result_of(rpc(url, "tools/list"))["tools"]}
        # gradio names a tool after its function; the page's events (run, stop, ...) are not tools
        assert set(tools) == {"speculate", "distribution_api"}
        schema = tools["speculate"]["inputSchema"]["properties"]
        assert {"prompt", "method", "max_new_tokens", "gamma", "temperature", "seed"} <= set(schema)
        assert "greedy" in schema["temperature"]["description"]  # from the docstring's Args
        assert "runs" in tools["distribution_api"]["inputSchema"]["properties"]
        called = result_of(rpc(url, "tools/call", {"name": "speculate", "arguments": {
            "prompt": "Repeat: red green blue red green blue", "method": "ngram", "max_new_tokens": 12, "gamma": 3}}))
        assert not called.get("isError"), called
        report = ast.literal_eval(called["content"][0]["text"])  # gradio writes the endpoint's dict as Python would
        assert report["identical_to_plain"] is True and report["metrics"]["new_tokens"] == 12
        wrong = result_of(rpc(url, "tools/call", {"name": "speculate", "arguments": {
            "prompt": "hi", "method": "ngram", "max_new_tokens": 12, "gamma": 99}}))
        assert wrong.get("isError") and "gamma" in wrong["content"][0]["text"]  # the form's message, not a trace


@pytest.mark.server
def test_without_mcp_there_is_no_mcp_endpoint_even_if_gradio_is_told_so(monkeypatch):
    """The control: the same app and request, MCP off; gradio's GRADIO_MCP_SERVER does not turn it on."""
    monkeypatch.setenv("GRADIO_MCP_SERVER", "true")
    with served(mcp=False) as url:
        response = rpc(url, "tools/list")
        assert response.status_code != 200 or "tools" not in response.text
        assert httpx.get(f"{url}/gradio_api/info", timeout=60).status_code == 200  # the server is up
