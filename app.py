"""specviz web app: `python app.py` serves it on http://127.0.0.1:7860 (`--port`, `--host`; offline default model;
GPU when there is one; models load on the first run, not at import). Everything else lives in specviz/ui/.

On a Hugging Face Space (SPACE_ID set), or with SPECVIZ_PUBLIC=1, it serves the public profile: the models it
offers only, a memory budget, a share of the queue per session and per client (specviz/service/public.py,
docs/deploy.md).

Several GPUs: `python app.py --device-map auto [--max-memory 0=60GiB,1=75GiB] [--draft-device cuda:0]`
shards every target over this machine's GPUs (also SPECVIZ_DEVICE_MAP, SPECVIZ_MAX_MEMORY, SPECVIZ_DRAFT_DEVICE).

`python app.py --mcp` (or SPECVIZ_MCP=1) also serves /speculate and /distribution as MCP tools (docs/app.md, "MCP")."""
import argparse
import os
import sys


def sleep_when_waiting(environ=os.environ, loaded=sys.modules) -> bool:
    """torch's OpenMP threads sleep when they wait, in the served app: OMP_WAIT_POLICY=PASSIVE where nobody chose
    a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT) and torch is not yet loaded (libgomp reads it once, as torch
    loads it). True when it was set here.

    libgomp's idle threads spin 300,000 turns at every barrier before they sleep, and a forward of a small model
    is hundreds of small operators. On a machine with more runnable threads than cores (other users' runs, a
    browser drawing the page) the thread with work waits off the core while its partner spins: on the 2-core CPU
    at a load of 11-14 plain decoding ran at 0.4 tok/s with two spinning threads (13 s of CPU for 24 tokens)
    against 11-14 with sleeping ones. On a quiet machine spinning is faster (46-56 tok/s against 35, one
    thread's speed), so the library, the command line and the bench keep libgomp's default: the app serves a
    shared machine, they measure a quiet one (docs/fast-path.md)."""
    if "torch" in loaded or "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


sleep_when_waiting()  # before anything imports torch

from specviz.service import serving  # noqa: E402
from specviz.ui import launch  # noqa: E402
from specviz.service.serving import configure_placement, configure_profile, machine_profile  # noqa: E402
from specviz.ui.mcp import mcp_wanted  # noqa: E402


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
    launch(server_name=args.host, server_port=args.port, mcp=mcp_wanted(args.mcp, serving.profile().public))
