"""Where a rank is, for the frameworks' own rendezvous (gRPC's TF_CONFIG, torch.distributed's
store): its host name, or on an emulated node the address of the node's interface."""
from __future__ import annotations

import os
import socket

LOOPBACK = "127.0.0.1"

#: Set by the emulated network (``launch.netns``): the interface each emulated node talks on.
NODE_IFACE_ENV = "PERFSUITE_NODE_IFACE"
#: Set in each emulated node's launcher: the node's name (its ranks share the machine's host name).
NODE_NAME_ENV = "PERFSUITE_NODE"
_SIOCGIFADDR = 0x8915


def node_address() -> str:
    """This rank's host name; on an emulated node (a network namespace of this machine, whose
    nodes all share its host name and each have their own loopback) the IPv4 address of the
    node's interface, which the other nodes can reach."""
    iface = os.environ.get(NODE_IFACE_ENV)
    if not iface:
        return socket.gethostname()
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface[:15].encode()))
    return socket.inet_ntoa(packed[20:24])



def node_name() -> str:
    """The node a rank runs on, as a straggler report names it: the host name, or the emulated
    node's own name."""
    return os.environ.get(NODE_NAME_ENV) or socket.gethostname()
