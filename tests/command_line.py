"""The command line run by the tests: in this process (specviz.cli.main, its output captured), or where only a
fresh interpreter shows what is tested, as `python -m specviz`."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass


@dataclass
class Done:
    """What a command left: as subprocess.run's CompletedProcess (returncode, stdout, stderr)."""
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def models_kept():
    """The models a command loads are unloaded when it returns, as its process would have freed them; those loaded
    before it (the session's default model) stay, so that the command finds them loaded."""
    from specviz.models.loading import loaded_models, unload_all

    before = {model.name for model in loaded_models()}
    try:
        yield
    finally:
        unload_all(keep=before)


@contextlib.contextmanager
def environment(env: dict | None):
    """os.environ with `env` on top within the block, then exactly as it was (the command line sets switches in
    the environment for the rest of its process)."""
    before = dict(os.environ)
    os.environ.update(env or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def run_cli(*args, env: dict | None = None) -> Done:
    """`specviz ARGS` in this process (specviz.cli.main) with its output captured and `env` over the environment;
    an exception that escapes main is written as the interpreter writes it (a traceback, exit code 1), so that
    the contract "no traceback" is checked as a fresh interpreter would show it."""
    from specviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with models_kept(), environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as exit_code:  # argparse's --help
            code = exit_code.code if isinstance(exit_code.code, int) else (0 if exit_code.code is None else 1)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            code = 1
    return Done(code or 0, out.getvalue(), err.getvalue())


def run_cli_subprocess(*args, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """`python -m specviz ARGS` in a fresh interpreter: for what only a new process shows (what loading draws,
    a process killed midway)."""
    return subprocess.run([sys.executable, "-m", "specviz", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**os.environ, **(env or {})})


def run_script(name: str, *args) -> Done:
    """`python -m scripts.NAME ARGS` in this process (the tool's main(argv)), its output captured."""
    import importlib

    main = importlib.import_module(f"scripts.{name}").main
    out, err = io.StringIO(), io.StringIO()
    with models_kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as exit_code:  # sys.exit(code) or sys.exit("message"), as the interpreter reports them
            code = exit_code.code if isinstance(exit_code.code, int) or exit_code.code is None else 1
            if not isinstance(exit_code.code, (int, type(None))):
                print(exit_code.code, file=sys.stderr)
    return Done(code or 0, out.getvalue(), err.getvalue())
