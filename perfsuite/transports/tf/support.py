"""What the TensorFlow transports share: availability checks (pytest side, no TF import) and the
gRPC cluster set-up (inside a rank, before TensorFlow is imported).

gRPC worlds still start through ``launch/world.py`` under mpiexec. MPI gives each rank its index
and the world size, a barrier and the gather of step times; the gradient bytes go over
TensorFlow's own gRPC ring. Each rank's ``TF_CONFIG`` names one loopback port per rank, chosen on
the launching side (``options["ports"]``, filled by the suite for ``needs_ports`` transports) or,
when absent, by the ranks themselves (each picks one and the ports are all-gathered). Either
way the ports come from below the kernel's ephemeral range (``listen_ports``): no outgoing
connection is ever given one, so only another listener can take it before TF binds it.
"""
from __future__ import annotations

import json
import os
import random
import socket
from importlib import metadata
from typing import Any

from ...records.errors import ConfigError, PortInUse, TransportUnavailable
from ..hosts import LOOPBACK, NODE_IFACE_ENV, node_address  # noqa: F401 (NODE_IFACE_ENV: tests read it here)

TF_INSTALL = "TensorFlow is not installed (pip install tensorflow-cpu, tensorflow on aarch64: perfsuite's tf extra)"
HOROVOD_INSTALL = ("Horovod is not installed; build it against this TensorFlow with "
                   "scripts/install-horovod.sh (see docs/tensorflow.md, Horovod)")
TF_KERAS_INSTALL = ("Horovod needs tf_keras (Keras 2) with Keras 3 installed: "
                    "pip install --no-deps tf_keras==<your TensorFlow version>")


def _has(name: str) -> bool:
    from .. import has_module

    return has_module(name)


def need_tf() -> str | None:
    from .. import need_mpi4py

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
    from .. import need_gpu

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


#: Listening ports are looked for from here up to the ephemeral range (above most services').
LISTEN_PORTS_FROM = 20000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def listen_ports(n: int, host: str = LOOPBACK, path: str = EPHEMERAL_RANGE) -> list[int]:
    """n distinct ports free on ``host`` for servers to listen on, held open together while
    chosen. Taken below the ephemeral range where there is room: a client retrying a server
    that is not listening yet can be given an ephemeral port equal to the server's, connect to
    itself and hold it, and gRPC clients retry like that while the other ranks import TF."""
    try:
        with open(path) as f:
            below = range(LISTEN_PORTS_FROM, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        below = range(0)
    socks: list[socket.socket] = []
    try:
        for port in random.sample(below, min(len(below), 64 * n)):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((host, port))
                socks.append(s)
            except OSError:
                s.close()
        while len(socks) < n:  # no room below the range (or all taken): the kernel's choice
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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
    hosts = comm.allgather(node_address())
    same_host = len(set(hosts)) == 1
    if options.get("ports") is not None:
        ports = check_ports(options["ports"], n)
        mine_free = port_is_free(ports[rank], LOOPBACK if same_host else "")
    else:
        mine, mine_free = listen_ports(1, LOOPBACK if same_host else "")[0], True
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


#: What TensorFlow's error says when its gRPC server cannot bind the port in ``TF_CONFIG``.
GRPC_BIND_FAILED = "Could not start gRPC server"


def multi_worker_strategy(tf: Any, implementation: str = "RING"):
    """MultiWorkerMirroredStrategy with the given collective implementation (RING = gRPC)."""
    exp = tf.distribute.experimental
    options = exp.CommunicationOptions(implementation=getattr(exp.CommunicationImplementation, implementation))
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except Exception as exc:
        if GRPC_BIND_FAILED not in str(exc):
            raise
        # The port was free when checked; another process bound it before TF did. Raised as
        # PortInUse so the suite starts the world again on fresh ports.
        raise PortInUse(f"{own_address()}: {GRPC_BIND_FAILED} (the port was taken after it was "
                        "checked); run again, or let the suite choose ports") from None



def own_address() -> str:
    """This worker's host:port from ``TF_CONFIG`` (set_tf_config), or "this worker"."""
    try:
        config = json.loads(os.environ["TF_CONFIG"])
        return config["cluster"]["worker"][config["task"]["index"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return "this worker"
