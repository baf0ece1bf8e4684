"""What the TensorFlow transports share: availability checks (pytest side, no TF import) and the
gRPC cluster set-up (inside a rank, before TensorFlow is imported).

gRPC worlds still start through ``launch/world.py`` under mpiexec. MPI gives each rank its index
and the world size, a barrier and the gather of step times; the gradient bytes go over
TensorFlow's own gRPC ring. Each rank's ``TF_CONFIG`` names one loopback port per rank, chosen on
the launching side (``options["ports"]``, filled by the suite for ``needs_ports`` transports) or,
when absent, by the ranks themselves (each binds port 0 and the ports are all-gathered).
"""
from __future__ import annotations

import json
import os
import socket
from importlib import metadata
from typing import Any

from ..errors import ConfigError, PortInUse, TransportUnavailable

TF_INSTALL = "TensorFlow is not installed (pip install 'perfsuite[tf]')"
HOROVOD_INSTALL = ("Horovod is not installed; build it against this TensorFlow with "
                   "scripts/install-horovod.sh (see docs/tensorflow.md, Horovod)")
TF_KERAS_INSTALL = ("Horovod needs tf_keras (Keras 2) with Keras 3 installed: "
                    "pip install --no-deps tf_keras==<your TensorFlow version>")
LOOPBACK = "127.0.0.1"


def _has(name: str) -> bool:
    from . import has_module

    return has_module(name)


def need_tf() -> str | None:
    from . import need_mpi4py

    return need_mpi4py() or (None if _has("tensorflow") else TF_INSTALL)


def need_horovod() -> str | None:
    """Looks for the packages only: importing horovod.tensorflow would import TensorFlow here."""
    return need_tf() or (None if _has("horovod") else HOROVOD_INSTALL) or \
        (None if _has("tf_keras") else TF_KERAS_INSTALL)


def _tf_is_cpu_only() -> bool:
    try:
        metadata.version("tensorflow")
        return False
    except metadata.PackageNotFoundError:
        pass
    try:
        metadata.version("tensorflow-cpu")
        return True
    except metadata.PackageNotFoundError:
        return False


def need_tf_gpu() -> str | None:
    """GPU training transports: a GPU (NVML, via gpu.py) and a TensorFlow built with CUDA."""
    from . import need_gpu

    reason = need_tf() or need_gpu()
    if reason is None and _tf_is_cpu_only():
        reason = "tensorflow-cpu has no CUDA support (pip install 'tensorflow[and-cuda]')"
    return reason


def need_horovod_gpu() -> str | None:
    return need_tf_gpu() or need_horovod()


# ---------------------------------------------------------------------------------------------
# inside a rank, before TensorFlow is imported


def check_ports(ports: Any, world_size: int) -> list[int]:
    """``options["ports"]`` checked: one TCP port (1..65535) per rank, all different."""
    if not isinstance(ports, (list, tuple)) or len(ports) != world_size or \
            not all(isinstance(p, int) and 0 < p < 65536 for p in ports) or len(set(ports)) != len(ports):
        raise ConfigError(f"ports {ports!r} must be {world_size} different TCP ports (1..65535), "
                          "one per rank")
    return list(ports)


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    s = socket.socket()
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def cluster_addresses(comm, options: dict) -> list[str]:
    """host:port of every rank's gRPC server; every rank checks its own port before TF binds it.

    Loopback when all ranks share a host; otherwise each rank's hostname (multi-node worlds).
    """
    rank, n = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    same_host = len(set(hosts)) == 1
    if options.get("ports") is not None:
        ports = check_ports(options["ports"], n)
        mine_free = port_is_free(ports[rank], LOOPBACK if same_host else "")
    else:
        s = socket.socket()
        s.bind((LOOPBACK if same_host else "", 0))
        mine, mine_free = s.getsockname()[1], True
        s.close()
        ports = comm.allgather(mine)
    busy = [(r, p) for r, (p, ok) in enumerate(zip(ports, comm.allgather(mine_free))) if not ok]
    if busy:
        # Every rank raises together (nobody is left waiting in a collective for the others).
        r, p = busy[0]
        raise PortInUse(f"port {p} for rank {r}'s gRPC server is in use; free it or let the "
                          "suite choose ports (leave options['ports'] unset)")
    return [f"{LOOPBACK if same_host else h}:{p}" for h, p in zip(hosts, ports)]


def set_tf_config(addresses: list[str], rank: int) -> dict:
    """Write ``TF_CONFIG`` for worker ``rank`` of the cluster and return it."""
    config = {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def quiet_tf_logs() -> None:
    """INFO/WARNING lines from TF's C++ side would bury a rank's real error in rank-N.err."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def import_tf(legacy_keras: bool = False):
    """Import TensorFlow once per rank; ``legacy_keras`` makes tf.keras be tf_keras (Horovod)."""
    if legacy_keras:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    quiet_tf_logs()
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise TransportUnavailable(f"TensorFlow cannot be imported ({exc})") from None
    return tf


def multi_worker_strategy(tf: Any, implementation: str = "RING"):
    """MultiWorkerMirroredStrategy with the given collective implementation (RING = gRPC)."""
    exp = tf.distribute.experimental
    options = exp.CommunicationOptions(implementation=getattr(exp.CommunicationImplementation, implementation))
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
