"""specviz web app: `python app.py` serves it on http://127.0.0.1:7860 (`--port`, `--host`; offline default model;
GPU when there is one; models load on the first run, not at import). Everything else lives in specviz/ui/.

On a Hugging Face Space (SPACE_ID set), or with SPECVIZ_PUBLIC=1, it serves the public profile: the models it
offers only, a memory budget, a share of the queue per session and per client (specviz/public.py, docs/deploy.md).

Several GPUs: `python app.py --device-map auto [--max-memory 0=60GiB,1=75GiB] [--draft-device cuda:0]`
shards every target over this machine's GPUs (also SPECVIZ_DEVICE_MAP, SPECVIZ_MAX_MEMORY, SPECVIZ_DRAFT_DEVICE).

`python app.py --mcp` (or SPECVIZ_MCP=1) also serves /speculate and /distribution as MCP tools (docs/app.md, "MCP")."""
import argparse
import os

from specviz.ui import launch, live
from specviz.ui.live import configure_placement, configure_profile, machine_profile
from specviz.ui.mcp import mcp_wanted


def options(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the specviz app.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)),
                        help="port to serve on (default 7860, or GRADIO_SERVER_PORT)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0: every interface)")
    parser.add_argument("--device-map", default=os.environ.get("SPECVIZ_DEVICE_MAP"),
                        help="shard targets over this machine's GPUs: auto, balanced, sequential or a JSON map")
    parser.add_argument("--max-memory", default=os.environ.get("SPECVIZ_MAX_MEMORY"), help="e.g. 0=20GiB,1=70GiB")
    parser.add_argument("--draft-device", default=os.environ.get("SPECVIZ_DRAFT_DEVICE"),
                        help="device of draft models (default: the target's first)")
    parser.add_argument("--mcp", action="store_true", help="also serve /speculate and /distribution as MCP tools "
                        "at /gradio_api/mcp/ (also SPECVIZ_MCP=1, the only switch on a public server; needs "
                        "requirements-mcp.txt)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = options()
    configure_placement(args.device_map, args.max_memory, args.draft_device)
    configure_profile(machine_profile())
    launch(server_name=args.host, server_port=args.port, mcp=mcp_wanted(args.mcp, live.PROFILE.public))
