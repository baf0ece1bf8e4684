"""``python -m perfsuite.worker JOB.json``: one rank of a world.

Every rank: start MPI, send its own stderr to ``rank-<r>.err`` in the job's folder (so a failure
is pinned to its rank whatever the launcher does with output), arm a stack dump on SIGUSR1 (the
runner asks for it before killing a hung world), run the kernel. Rank 0 streams each finished
case to ``partial.jsonl`` and writes one versioned result file at the end. A rank that raises
writes ``rank-<r>.failed`` and aborts the world so nobody waits on it.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
import traceback

JOB_FORMAT = "perfsuite-job"
JOB_VERSION = 1


MULTIPLE_THREAD_TRANSPORTS = ("horovod", "horovod-nccl")  # Horovod's background thread calls MPI


def thread_level(job: dict) -> str:
    return "multiple" if job.get("transport") in MULTIPLE_THREAD_TRANSPORTS else "funneled"


def _redirect_stderr(path: str):
    f = open(path, "a", buffering=1)
    os.dup2(f.fileno(), 2)
    sys.stderr = f
    return f


def _write_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m perfsuite.worker JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    if job.get("format") != JOB_FORMAT or job.get("version") != JOB_VERSION:
        print(f"perfsuite.worker: {argv[0]} is not a {JOB_FORMAT} v{JOB_VERSION} file", file=sys.stderr)
        return 2

    import mpi4py

    # mpi4py asks for MPI_THREAD_MULTIPLE by default, and under it MPICH's large-message
    # allreduce ran ~40% slower here (64 MiB: 56 ms vs 40 ms for the same loop in C). Ranks call
    # MPI from their main thread only, so ask for FUNNELED, as a C benchmark's MPI_Init gives;
    # transports whose library calls MPI from its own thread (Horovod) ask for more.
    mpi4py.rc.thread_level = job.get("options", {}).get("mpi_thread_level") or thread_level(job)
    from mpi4py import MPI  # initialises MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    folder = job["folder"]
    err = _redirect_stderr(os.path.join(folder, f"rank-{rank}.err"))
    faulthandler.register(signal.SIGUSR1, file=err, all_threads=True)
    with open(os.path.join(folder, f"rank-{rank}.pid"), "w") as f:
        f.write(f"{os.getpid()} {socket.gethostname()}\n")
    try:
        code = _run(job, comm, rank, size, folder)
        # This rank ended cleanly: if it exits before a failing peer, the runner's death watch
        # must not take it for the rank that died first.
        open(os.path.join(folder, f"rank-{rank}.done"), "w").close()
        return code
    except BaseException as exc:  # any rank failure must end the whole world, not hang it
        traceback.print_exc()
        # Written whole or not at all: another rank's Abort may kill this one mid-write, and a
        # half-written file would name this rank with an empty message.
        tmp = os.path.join(folder, f".rank-{rank}.failed.tmp")
        with open(tmp, "w") as f:
            f.write(f"{type(exc).__name__}: {exc}\n")
        os.replace(tmp, os.path.join(folder, f"rank-{rank}.failed"))
        err.flush()
        comm.Abort(1)
        return 1


def _run(job: dict, comm, rank: int, size: int, folder: str) -> int:
    from . import fingerprint, kernels
    from .kernels.context import RankContext
    from .kernels.faults import FaultSwitch
    from .errors import TransportUnavailable
    from .model import RESULT_FORMAT, RESULT_VERSION, Case

    comm.Barrier()  # every rank is up: the world has started
    ready_at = time.time()
    if size != job["world_size"]:
        hint = ""
        if size == 1 and os.environ.get("SLURM_STEP_ID") is not None:
            # srun without a PMI plugin starts every task as its own 1-rank MPI world.
            hint = ("; srun started each task as a singleton: name the PMI, e.g. "
                    "--launcher-args=--mpi=pmi2 (MPICH) or --mpi=pmix (Open MPI)")
        raise RuntimeError(f"launcher started {size} ranks, the job wants {job['world_size']}{hint}")
    cases = [Case.from_dict(c) for c in job["cases"]]
    partial = open(os.path.join(folder, "partial.jsonl"), "a") if rank == 0 else None

    def emit(sample: dict) -> None:
        partial.write(json.dumps(sample) + "\n")
        partial.flush()

    ctx = RankContext(comm=comm, rank=rank, world_size=size, transport=job["transport"],
                      cases=cases, options=job.get("options", {}), emit=emit,
                      fault=FaultSwitch(rank))
    try:
        extra = kernels.load(job["benchmark"]).run(ctx)
    except TransportUnavailable as exc:
        # Raised by every rank together (transports agree first, transports/gpu.py:agree), so
        # nobody is left in a collective: the world ends cleanly with no samples and the reason,
        # which the suite reports as a skip ("MPI not CUDA-aware"), not as a crash.
        extra = {"unavailable": str(exc)}
    if rank == 0:
        partial.close()
        with open(os.path.join(folder, "partial.jsonl")) as f:
            samples = [json.loads(line) for line in f if line.strip()]
        _write_atomic(job["out"], {
            "format": RESULT_FORMAT, "version": RESULT_VERSION, "benchmark": job["benchmark"],
            "transport": job["transport"], "world_size": size,
            "fingerprint": fingerprint.collect(mpi=True),
            "world_start_s": ready_at - job["spawned_at"], "wall_s": time.time() - job["spawned_at"],
            "error": None, "extra": extra or {}, "samples": samples,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
