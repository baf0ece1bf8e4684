"""``python -m perfsuite.worker JOB.json``: one rank of a world.

Every rank: start MPI, send its own stderr to ``rank-<r>.err`` in the job's folder (so a failure
is pinned to its rank whatever the launcher does with output), arm a stack dump on SIGUSR1 (the
runner asks for it before killing a hung world), run the kernel. Rank 0 streams each finished
case to ``partial.jsonl`` and writes one versioned result file at the end. A rank that raises
writes ``rank-<r>.failed`` and aborts the world so nobody waits on it.
"""
from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import socket
import sys
import time
import traceback


def thread_level(job: dict) -> str:
    """The MPI thread level the job's transport asks for (``TransportSpec.thread_level``);
    "funneled" for a transport the registry does not know for the job's benchmark."""
    from .records.errors import ConfigError
    from .transports import spec

    try:
        return spec(str(job.get("transport")), str(job.get("benchmark", "allreduce"))).thread_level
    except ConfigError:
        return "funneled"


def _redirect_stderr(path: str):
    f = open(path, "a", buffering=1)
    os.dup2(f.fileno(), 2)
    sys.stderr = f
    return f


def main(argv: list[str]) -> int:
    from .records.errors import FormatError
    from .store.formats import read_job

    if len(argv) != 1:
        print("usage: python -m perfsuite.worker JOB.json", file=sys.stderr)
        return 2
    try:
        job = read_job(argv[0])
    except (OSError, ValueError, FormatError) as exc:
        print(f"perfsuite.worker: {exc}", file=sys.stderr)
        return 2

    placement = _place(job)  # before MPI_Init: a CUDA-aware MPI starts CUDA inside it
    import mpi4py

    # mpi4py asks for MPI_THREAD_MULTIPLE by default, under which MPICH takes slower paths for
    # large messages than a C benchmark's MPI_Init gets (docs/measurements.md). Ranks call
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
        code = _run(job, comm, rank, size, folder, placement)
        # This rank ended cleanly: if it exits before a failing peer, the runner's death watch
        # must not take it for the rank that died first.
        open(os.path.join(folder, f"rank-{rank}.done"), "w").close()
        return code
    except BaseException as exc:  # any rank failure must end the whole world, not hang it
        traceback.print_exc()
        # Written whole or not at all: another rank's Abort may kill this one mid-write, and a
        # half-written file would name this rank with an empty message.
        from .store.formats import atomic_write

        atomic_write(os.path.join(folder, f"rank-{rank}.failed"), f"{type(exc).__name__}: {exc}\n")
        err.flush()
        comm.Abort(1)
        return 1


def _place(job: dict) -> dict:
    """A device transport's rank: its one GPU, from the launcher's local rank. Host transports,
    and host arrays standing in for device buffers (the suite's tests), change nothing."""
    from .transports import REGISTRY, placement

    gpu = any(s.device == "gpu" for s in REGISTRY.values() if s.name == job.get("transport"))
    if not gpu or job.get("options", {}).get("array_module", "cupy") != "cupy":
        return {}
    return placement.place_rank()


def _run(job: dict, comm, rank: int, size: int, folder: str, placement: dict) -> int:
    from .store import fingerprint
    from .records.errors import TransportUnavailable
    from .store.formats import atomic_write, dump_result
    from .kernels.context import RankContext
    from .kernels.faults import FaultSwitch
    from .records.model import Case, Result, Sample
    from .transports.cuda_aware import libmpi_paths

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
        extra = _kernel(job).run(ctx)
    except TransportUnavailable as exc:
        # Raised by every rank together (transports agree first, transports/gpu.py:agree), so
        # nobody is left in a collective: the world ends cleanly with no samples and the reason,
        # which the suite reports as a skip ("MPI not CUDA-aware"), not as a crash.
        extra = {"unavailable": str(exc)}
    if rank == 0:
        partial.close()
        with open(os.path.join(folder, "partial.jsonl")) as f:
            samples = tuple(Sample.from_dict(json.loads(line)) for line in f if line.strip())
        # What this rank imported, read after the kernel ran (TensorFlow, CuPy load lazily):
        # an A/B arm is another version only if its ranks loaded other files (experiments/provenance).
        imports = fingerprint.imported(libmpi=libmpi_paths(), also=user_packages(job))
        result = Result(job["benchmark"], job["transport"], size, samples,
                        fingerprint=fingerprint.collect(mpi=True),
                        world_start_s=ready_at - job["spawned_at"],
                        wall_s=time.time() - job["spawned_at"],
                        extra={**(extra or {}), **({"placement": placement} if placement else {}),
                               fingerprint.IMPORTS_KEY: imports})
        atomic_write(job["out"], json.dumps(dump_result(result)))
    return 0


def user_packages(job: dict) -> list[str]:
    """The top-level package of a user benchmark's module (``perfsuite.benchmark``): the user's
    own code, which two commits of the user's repository differ in while perfsuite is one."""
    source = (job.get("options") or {}).get("user_benchmark") or {}
    module = source.get("module")
    if not isinstance(module, str) or not module:
        return []
    return ["perfsuite_user_main" if module == "__main__" else module.partition(".")[0]]


#: Kernel modules by the names a launcher of another version may write in its job (issue 53
#: put the kernels in folders by kind). A launcher of this version names a built-in benchmark's
#: kernel not at all (``bench.plan``), so a rank of any version runs its own registry's.
MOVED_KERNELS = {
    "perfsuite.kernels.allreduce": "perfsuite.kernels.collectives.allreduce",
    "perfsuite.kernels.p2p": "perfsuite.kernels.collectives.p2p",
    "perfsuite.kernels.injection": "perfsuite.kernels.collectives.injection",
    "perfsuite.kernels.yardstick": "perfsuite.kernels.collectives.yardstick",
    "perfsuite.kernels.tf_epoch": "perfsuite.kernels.training.tf_epoch",
    "perfsuite.kernels.torch_epoch": "perfsuite.kernels.training.torch_epoch",
    "perfsuite.kernels.user": "perfsuite.kernels.user.step",
}


def _kernel(job: dict):
    """The kernel module the job names, else the one its benchmark registered."""
    module = job.get("kernel")
    if not module:
        from .bench import get

        module = get(job["benchmark"]).kernel
    return importlib.import_module(MOVED_KERNELS.get(module, module))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
