"""``perfsuite capture``'s process: the user's unmodified command, run with the capture hook
(``capture_hook/sitecustomize.py``) first on its PYTHONPATH, so every rank it starts writes its
communication as a PyTorch trace into the folder; then the folder's manifest."""
from __future__ import annotations

import json
import os
import signal
import subprocess

from ..records import trace as traces, trace_formats
from ..records.errors import ConfigError, LaunchError
from ..store.formats import atomic_write

HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture_hook")
ENV = "PERFSUITE_CAPTURE_DIR"


SKIP_ENV = "PERFSUITE_CAPTURE_SKIP_CALLS"


def capture(command: list[str], out_dir: str, skip_calls: int = 0) -> tuple[int, list[str]]:
    """Run ``command`` with the hook; returns (its exit status, the rank files written). The
    folder must hold no earlier capture: ranks of two jobs would read as one."""
    if not command:
        raise ConfigError("perfsuite capture needs the command to run after --, e.g. "
                          "perfsuite capture -o trace -- torchrun --nproc-per-node 2 train.py")
    out = os.path.abspath(out_dir)
    os.makedirs(out, exist_ok=True)
    if trace_formats.rank_files(out):
        raise ConfigError(f"-o {out_dir!r} already holds a capture ({len(trace_formats.rank_files(out))} trace files); "
                          "name an empty folder")
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, ENV: out, SKIP_ENV: str(int(skip_calls)),
           "PYTHONPATH": HOOK + (os.pathsep + path if path else "")}
    try:
        proc = subprocess.Popen(command, env=env, start_new_session=True)
    except FileNotFoundError as exc:
        raise LaunchError(f"perfsuite capture: {command[0]} not found ({exc})") from None
    try:
        status = proc.wait()
    except BaseException:  # interrupted: the command's whole session goes, none of it left behind
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    files = trace_formats.rank_files(out)
    torch_version = None
    try:
        from importlib import metadata

        torch_version = metadata.version("torch")
    except Exception:  # noqa: BLE001 - the manifest says what it knows
        pass
    atomic_write(os.path.join(out, traces.MANIFEST),
                 json.dumps(traces.manifest(len(files), list(command), torch_version), indent=1))
    return status, files
