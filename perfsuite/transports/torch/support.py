"""What the torch transports share: availability checks (pytest side, no torch import) and the
process group's rendezvous (inside a rank).

Worlds start as every world does (mpiexec or srun): MPI gives each rank its index, the world
size and a broadcast, so the process group needs no launcher of its own (no torchrun, no
MASTER_ADDR in the environment). Rank 0 opens torch's TCPStore on a port the kernel picks (port
0, so no other process can take it between choosing and binding), broadcasts its address and
port over MPI, and every rank joins the group through that store. A group that cannot form
(a store the others cannot reach, a backend that fails to start) is agreed, so every rank
reports the same one line instead of one rank hanging in the others' collectives.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import struct
from datetime import timedelta
from importlib import metadata
from pathlib import Path

from ...records.errors import TransportUnavailable
from ..hosts import LOOPBACK, NODE_IFACE_ENV, node_address

TORCH_INSTALL = "PyTorch is not installed (pip install torch torchvision: perfsuite's torch extra)"
BACKENDS = ("gloo", "nccl", "mpi")
#: Seconds the ranks wait for each other while the group forms (torch's default is 30 min).
RENDEZVOUS_S = 120


def _has(name: str) -> bool:
    from .. import has_module

    return has_module(name)


def torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def need_torch() -> str | None:
    from .. import need_mpi4py

    return need_mpi4py() or (None if _has("torch") else TORCH_INSTALL)


def need_torch_gpu() -> str | None:
    """torch-nccl: a GPU (NVML, no CUDA context) and a torch built with CUDA. CuPy is not needed."""
    from ..gpu import nvml_gpu_count, visible_devices_hidden

    reason = need_torch()
    if reason:
        return reason
    count, how = nvml_gpu_count()
    if count == 0:
        return how if how != "NVML" else "no NVIDIA GPU found (NVML counts 0 devices)"
    if visible_devices_hidden():
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    if (torch_version() or "").endswith("+cpu"):
        return f"torch {torch_version()} is a CPU build (install a CUDA build of torch)"
    return None


def need_torch_mpi() -> str | None:
    reason = need_torch()
    if reason:
        return reason
    return None if torch_links_mpi() else (
        f"torch {torch_version()} has no MPI backend (the PyPI wheels are built without it; "
        "build torch from source with USE_MPI=1, or use torch-gloo)")


@functools.lru_cache(maxsize=1)
def torch_links_mpi() -> bool:
    """Whether torch's C++ library links an MPI library, read from its ELF dynamic section:
    asking ``torch.distributed.is_mpi_available()`` would import torch (seconds, and CUDA's
    libraries) in the process that only collects cases."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return any(n.startswith(("libmpi", "libmpich", "libmsmpi"))
               for so in lib.glob("libtorch*.so*") for n in elf_needed(so))


def elf_needed(path: str | os.PathLike) -> list[str]:
    """The DT_NEEDED names of a 64-bit little-endian ELF shared object ([] for anything else)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return []
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            loads, dynamic = [], None
            for i in range(phnum):
                kind, _flags, off, vaddr, _pa, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if kind == 1:
                    loads.append((vaddr, off, filesz))
                elif kind == 2:
                    dynamic = (off, filesz)
            if dynamic is None:
                return []
            f.seek(dynamic[0])
            raw = f.read(dynamic[1])
            entries = [struct.unpack_from("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
            strtab = next((v for t, v in entries if t == 5), None)  # DT_STRTAB, a virtual address
            if strtab is None:
                return []
            base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
            names = []
            for tag, value in entries:
                if tag == 0:
                    break
                if tag == 1 and base is not None:  # DT_NEEDED: an offset into the string table
                    f.seek(base + value)
                    names.append(f.read(256).split(b"\0", 1)[0].decode(errors="replace"))
            return names
    except (OSError, struct.error):
        return []


# ---------------------------------------------------------------------------------------------
# inside a rank


def import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise TransportUnavailable(f"PyTorch cannot be imported ({exc})") from None
    return torch, dist


def start_group(comm, backend: str, timeout_s: float = RENDEZVOUS_S, device=None):
    """Collective: join every rank of ``comm`` to one torch.distributed process group of
    ``backend``. Returns (torch.distributed, facts). Raises TransportUnavailable on every rank
    together when the group cannot form."""
    from ..gpu import agree

    torch, dist = import_torch()
    rank, n = comm.Get_rank(), comm.Get_size()
    available = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available,
                 "mpi": dist.is_mpi_available}[backend]()
    agree(comm, None if available else f"torch {torch.__version__} has no {backend} backend")
    iface = os.environ.get(NODE_IFACE_ENV)
    if iface:  # an emulated node: the backends' own sockets go out of its interface too
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)
    hosts = comm.allgather(node_address())
    host = LOOPBACK if len(set(hosts)) == 1 else hosts[0]
    store, reason, port = None, None, None
    timeout = timedelta(seconds=timeout_s)
    if backend != "mpi":
        if rank == 0:
            try:
                store = dist.TCPStore(host, 0, n, True,
                                      timeout=timeout, wait_for_workers=False)
                port = store.port
            except (RuntimeError, OSError) as exc:
                reason = f"rank 0 could not open torch's TCPStore on {host} ({exc})"
        agree(comm, reason)
        port = comm.bcast(port, root=0)
        if rank != 0:
            try:
                store = dist.TCPStore(host, port, n, False, timeout=timeout)
            except (RuntimeError, OSError) as exc:
                reason = f"rank {rank} could not reach torch's TCPStore at {host}:{port} ({exc})"
        agree(comm, reason)
    try:
        kwargs = {"device_id": device} if device is not None else {}
        if backend == "mpi":
            dist.init_process_group("mpi", **kwargs)
        else:
            dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout, **kwargs)
    except (RuntimeError, ValueError) as exc:
        reason = f"torch.distributed could not start its {backend} group ({str(exc).splitlines()[0]})"
    agree(comm, reason)
    facts = {"torch": torch.__version__, "backend": backend,
             "rendezvous": f"TCPStore {host}:{port}" if port is not None else "MPI"}
    if backend == "nccl" and torch.cuda.is_available():
        facts["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    return dist, facts


def cuda_device(comm, torch, on_cpu: bool = False):
    """Collective: this rank's device and facts. A GPU from the node rank (the worker already
    narrowed CUDA_VISIBLE_DEVICES to one where the launcher named the local rank), refused on
    every rank together where CUDA sees none or two ranks landed on one GPU, which NCCL rejects;
    ``on_cpu`` (the suite's tests) keeps torch-nccl's code on host tensors."""
    import socket

    from ..gpu import agree, node_rank, shared_devices

    local_rank, local_size = node_rank(comm)
    facts = {"ranks_on_node": local_size, "torch_device": "cpu" if on_cpu else "cuda"}
    if on_cpu:
        return torch.device("cpu"), facts
    reason, where, device = None, "host", None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 1:
        reason = (f"torch {torch.__version__} sees no CUDA device "
                  f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    else:
        index = local_rank % count
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(index)
        where = (f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
                 f"{getattr(props, 'pci_device_id', 0):02x}.0")
        facts.update(device=index, gpu=props.name, pci_bus_id=where, gpus_visible=count)
    agree(comm, reason)
    shared = shared_devices(comm.allgather((socket.gethostname(), where)))
    facts["ranks_per_gpu"] = max([len(g) for g in shared], default=1)
    agree(comm, None if facts["ranks_per_gpu"] == 1 else
          f"NCCL needs one GPU per rank, but {facts['ranks_per_gpu']} ranks share a GPU; use world sizes up "
          "to the number of GPUs")
    return device, facts


def stop_group(dist) -> None:
    """After the kernel's last barrier: the group's threads and sockets go now."""
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()
