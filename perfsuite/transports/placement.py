"""Which GPU a rank may see, decided before MPI starts.

A CUDA-aware MPI initialises CUDA inside ``MPI_Init``; after that the CUDA runtime ignores any
change of ``CUDA_VISIBLE_DEVICES``. So the worker narrows the variable first, from the local
rank the launcher already put in the environment (Hydra, Open MPI, MVAPICH2, Slurm, PALS).
Where no launcher says, the transports fall back to the node split after ``MPI_Init``
(``gpu.node_rank``), which is right for any MPI that leaves CUDA alone in ``MPI_Init``.

- a device transport's rank sees one GPU: local rank modulo the GPUs it may use (so ranks
  share GPUs round-robin when there are fewer GPUs than ranks, as ``gpu.pick_device``);
- a host training transport's TensorFlow sees none (``hide_gpus_from_tf``, before TF runs an
  op): TensorFlow built with CUDA would otherwise put every host rank on GPU 0 and time GPU
  training under a host label. Host ranks' environment is left alone: setting
  ``CUDA_VISIBLE_DEVICES=-1`` there moved a timing check (Horovod's plain loop against mpi's)
  on this CPU-only machine, where it has nothing to hide.

Nothing here imports CuPy or TensorFlow; only ``pin_rank_gpu`` (the fallback) uses MPI.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping

#: (local rank variable, who sets it), in the order they are trusted.
LOCAL_RANK_VARS = (
    ("MPI_LOCALRANKID", "MPICH Hydra"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"),
    ("MV2_COMM_WORLD_LOCAL_RANK", "MVAPICH2"),
    ("PALS_LOCAL_RANKID", "Cray PALS"),
    ("SLURM_LOCALID", "Slurm"),
)
HIDDEN = "-1"  # CUDA stops at the first invalid id: "-1" hides every GPU
ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


def local_rank_from_env(env: Mapping[str, str]) -> tuple[int, str] | None:
    """(this rank's index on its node, the variable that said so), or None."""
    for var, who in LOCAL_RANK_VARS:
        value = env.get(var, "").strip()
        if value.isdigit():
            return int(value), f"{var} ({who})"
    return None


def rank_visible_devices(local_rank: int, visible: str | None, gpu_count: int) -> str | None:
    """Pure: the ``CUDA_VISIBLE_DEVICES`` value that leaves this rank only its own GPU, chosen
    as ``gpu.pick_device`` chooses (local rank modulo the GPUs the rank may use, in CUDA's
    order); None when there is nothing to choose from (no GPU, or every GPU hidden)."""
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not ids or ids == [HIDDEN]:
            return None
    else:
        ids = [str(i) for i in range(gpu_count)]
    if not ids:
        return None
    return ids[local_rank % len(ids)]


def _narrow(env: MutableMapping[str, str], local_rank: int, gpu_count: Callable[[], int]) -> str | None:
    """Leave this rank only its own GPU in ``env``, and let TF grow its memory there (TF and
    CuPy/NCCL share the GPU: TF takes what it needs). Returns the value set, or None."""
    env.setdefault(ALLOW_GROWTH, "true")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    value = rank_visible_devices(local_rank, visible, 0 if visible is not None else gpu_count())
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    return value


def _nvml_count() -> int:
    from .gpu import nvml_gpu_count

    return nvml_gpu_count()[0]


def place_rank(env: MutableMapping[str, str] | None = None,
               gpu_count: Callable[[], int] = _nvml_count) -> dict[str, str | None]:
    """Narrow this device-transport rank's ``CUDA_VISIBLE_DEVICES`` to its GPU, before MPI or
    CUDA starts. Returns the facts a result keeps: the value and who chose it."""
    env = os.environ if env is None else env
    found = local_rank_from_env(env)
    if found is None:
        env.setdefault(ALLOW_GROWTH, "true")
        return {"cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
                "gpu_chosen_by": "node rank after MPI_Init (the launcher set no local rank)"}
    local_rank, var = found
    return {"cuda_visible_devices": _narrow(env, local_rank, gpu_count),
            "gpu_chosen_by": f"local rank {local_rank} from {var}"}


def pin_rank_gpu(comm) -> str | None:
    """Collective (node split): narrow CUDA_VISIBLE_DEVICES to this rank's GPU and let TF grow
    its memory. Must run before CUDA starts in this process, which then ignores both."""
    from .gpu import node_rank

    return _narrow(os.environ, node_rank(comm)[0], _nvml_count)


def hide_gpus_from_tf(tf) -> None:
    """Before TF runs an op: a host transport's TensorFlow uses no GPU (nothing to do, and
    nothing done, where TF lists none)."""
    if tf.config.list_physical_devices("GPU"):
        tf.config.set_visible_devices([], "GPU")


def tf_gpu_reason(tf) -> str | None:
    """Why TensorFlow cannot train on exactly one GPU in this rank, or None. Only asks: a
    device setting changed after TF initialised its devices (an op already ran) raises."""
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) == 1:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"TensorFlow sees {len(gpus)} GPUs with CUDA_VISIBLE_DEVICES={visible!r}; "
            "GPU training needs exactly one per rank (and TensorFlow built with CUDA)")
