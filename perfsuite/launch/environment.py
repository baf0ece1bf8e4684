"""Where a world runs: plainly on this machine, on emulated nodes, behind a throttled disk.

ReFrame wraps a launcher instead of editing it (``LauncherWrapper``); here an environment wraps
the launch configuration. ``prepared`` is one context manager for every kind: it builds what
the world needs (network namespaces and shaped links, a blkio cgroup), yields a ``Prepared``
with the launch configuration to start the world with, and removes everything on the way out,
whatever happened inside. ``Prepared.check`` then states, on the world's result, what the
environment can prove (that the traffic crossed the emulated links).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..records.errors import Unavailable
from ..store.fingerprint import is_root
from ..records.model import Result, Sample
from ..transports.tf.support import listen_ports
from .launchers import LaunchConfig


@dataclass
class Prepared:
    """The launch configuration a world starts with, and what to verify on its result."""

    launch: LaunchConfig
    checks: list[Callable[[Result], Result]] = field(default_factory=list)

    def check(self, result: Result) -> Result:
        for f in self.checks:
            result = f(result)
        return result


@contextlib.contextmanager
def prepared(world_size: int, launch: LaunchConfig, *, network: Any = None, disk: Any = None,
             wire_bytes: Callable[[Sample], int] = lambda s: 0) -> Iterator[Prepared]:
    """The environment of one world. ``network``: a ``netns.Shaping`` (one rank per emulated
    node); ``disk``: a ``diskio.DiskThrottle`` with its data folder, as ``(throttle, folder, tag)``.
    Raises ``Unavailable`` (a skip, with the reason) when this machine cannot make it."""
    from .commands import default_program, run_command

    with contextlib.ExitStack() as stack:
        env = Prepared(launch)
        if disk is not None:
            from .diskio import DiskThrottleSession, unavailable_reason

            throttle, folder, tag = disk
            reason = unavailable_reason(is_root())
            if reason:
                raise Unavailable(f"--emulated-disk {throttle.label}: {reason}")
            cgroup = stack.enter_context(DiskThrottleSession(throttle, folder, run_command, tag=tag))
            env.launch = replace(env.launch, cgroup=cgroup)
        if network is not None:
            from . import netns

            reason = netns.unavailable_reason() or (
                netns.cpu_unavailable_reason() if any(f.cpu for f in network.faults) else None)
            if reason:
                raise Unavailable(reason)
            if world_size < 2:
                raise Unavailable("an emulated network needs a world of >= 2 ranks")
            net = network.network(world_size)
            session = stack.enter_context(netns.NetnsSession(net, run_command))
            env.launch = session.launch_config(env.launch, world_size,
                                               launch.program or default_program("mpiexec"))
            before = sum(session.sent_bytes())
            env.checks.append(lambda result: _crossed(result, net, sum(session.sent_bytes()) - before,
                                                      wire_bytes))
        yield env


def _crossed(result: Result, net: Any, sent: int, wire_bytes: Callable[[Sample], int]) -> Result:
    """Proof that the traffic crossed the emulated network: the shaped links' byte counters must
    have grown by at least the bytes the world's collectives had to send, or every sample of the
    world is marked invalid with the numbers."""
    need = sum(wire_bytes(s) for s in result.samples)
    crossed = sent >= need
    why = {} if crossed else {"invalid_reason": (
        f"the emulated links sent {sent} bytes, fewer than the {need} the collectives must send: "
        "traffic did not cross the emulated network")}
    samples = tuple(replace(s, valid=s.valid and crossed,
                            info={**s.info, "emulated_network": net.label, "wire_bytes_sent": sent,
                                  "wire_bytes_min": need, **why})
                    for s in result.samples)
    extra = {**result.extra, "emulated_network": {"rate": net.rate, "nodes": net.nodes,
             **({"faults": [f.label for f in net.faults]} if net.faults else {}),
             "wire_bytes_sent": sent, "wire_bytes_min": need, "crossed": crossed}}
    return replace(result, samples=samples, extra=extra)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports on ``host`` for a world's servers (outside the ephemeral range)."""
    return listen_ports(n, host)
