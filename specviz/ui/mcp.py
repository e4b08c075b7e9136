"""The app as an MCP server: an assistant (Claude Desktop, Cursor, an agent) calls /speculate and /distribution as
tools, over gradio's streamable HTTP transport at /gradio_api/mcp/ (docs/app.md, "MCP").

Off unless asked for (`python app.py --mcp` or SPECVIZ_MCP=1). On a public server only SPECVIZ_MCP=1, the owner's
setting, turns it on: a tool call runs the engine like a page's run and takes the same share of the queue, and
gradio's own GRADIO_MCP_SERVER does not switch it on behind the profile's back. The tool schemas come from the
endpoints' docstrings (their Args sections)."""
from __future__ import annotations

import os
from collections.abc import Mapping

import gradio as gr

TOOLS = ("speculate", "distribution")  # the named endpoints an assistant may call; the page's events are not tools
NOT_A_TOOL = "specviz-page"  # gradio lists a function as a tool unless its _mcp_type says otherwise
INSTALL = "pip install -r requirements-mcp.txt (gradio's mcp extra, pinned)"


def mcp_wanted(flag: bool, public: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to serve MCP: --mcp or SPECVIZ_MCP=1 on this machine; on a public server SPECVIZ_MCP=1 only."""
    env = os.environ if environ is None else environ
    owner = env.get("SPECVIZ_MCP", "0").strip().lower() in ("1", "true", "yes", "on")
    return owner or (flag and not public)


def check_installed() -> None:
    """A clear message, not gradio's traceback, when MCP is asked for without the mcp package."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise SystemExit(f"specviz: MCP needs the mcp package: {INSTALL}") from None


def only_these_tools(demo: gr.Blocks, names=TOOLS) -> list[str]:
    """Marks every named endpoint but `names` as no MCP tool (the page's events take its components and return
    its views: no use to an assistant). Returns the endpoints left as tools."""
    kept = []
    for block_fn in demo.fns.values():
        if block_fn.api_name in names:
            kept.append(block_fn.api_name)
        elif block_fn.fn is not None:
            function = getattr(block_fn.fn, "__func__", block_fn.fn)  # a bound method's attributes are its function's
            function._mcp_type = NOT_A_TOOL
    return sorted(kept)
