"""An emulated slow disk for the fetch stall: a cgroup (v1 blkio) read-bandwidth throttle on the
device that holds the dataset, joined by the world's launcher before it starts its ranks.

Why: this suite emulates the cloud instance it studies. A VM's virtio disk reads cold files at
hundreds of MB/s, so on it the fetch stall of a small dataset is a few ms per step, lost in the
noise; a throttle makes the disk of a smaller instance, the way tbf makes its network. Reads
served from the page cache never reach the throttle, so a warm run is unaffected by it.
Everything here builds commands (pure); ``DiskThrottleSession`` runs them through the world
runner's ``run_command`` and always removes the cgroup it made.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..records.errors import ConfigError

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)b/s\s*$", re.I)


@dataclass(frozen=True)
class DiskThrottle:
    read_bps: int  # bytes per second

    @property
    def label(self) -> str:
        return f"{self.read_bps / 1e6:g}MB/s"


def parse_disk_rate(text: str) -> DiskThrottle:
    """'20MB/s' -> 20e6 B/s, '5MiB/s' -> 5 x 2**20 B/s (a rate of at least 64 KB/s)."""
    m = _RATE.match(str(text))
    if not m:
        raise ConfigError(f"emulated disk rate {text!r} must be like 20MB/s or 5MiB/s")
    base = 1024 if m.group(3) else 1000
    bps = int(float(m.group(1)) * base ** " kmg".index((m.group(2) or " ").lower()))
    if bps < 64_000:
        raise ConfigError(f"emulated disk rate {text!r} is below 64KB/s; give a larger rate")
    return DiskThrottle(bps)


def device_of(path: str | os.PathLike) -> str:
    """'MAJOR:MINOR' of the whole disk holding ``path`` (blkio throttles disks, not partitions)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sysdev / "partition").exists():  # a partition: throttle its parent disk
        parent = (sysdev.resolve().parent / "dev").read_text().strip()
        return parent
    return f"{major}:{minor}"


def unavailable_reason(is_root: bool | None = None) -> str | None:
    if is_root is None:
        from ..store.fingerprint import is_root as root

        is_root = root()
    if not is_root:
        return "not root (a disk throttle needs a cgroup)"
    if not Path(BLKIO_ROOT, "blkio.throttle.read_bps_device").exists():
        return f"no cgroup v1 blkio controller at {BLKIO_ROOT} (cannot emulate a slow disk here)"
    return None


def cgroup_path(tag: str) -> str:
    return f"{BLKIO_ROOT}/psio-{os.getpid()}-{tag}"


def setup_commands(cgroup: str, device: str, throttle: DiskThrottle) -> list[list[str]]:
    return [["mkdir", cgroup],
            ["sh", "-c", f"echo '{device} {throttle.read_bps}' > '{cgroup}/blkio.throttle.read_bps_device'"]]


def teardown_commands(cgroup: str) -> list[list[str]]:
    return [["rmdir", cgroup]]


def join_argv(cgroup: str, argv: list[str]) -> list[str]:
    """Run ``argv`` inside ``cgroup``: the shell joins it, then becomes the launcher, so the
    launcher and every rank it starts inherit the throttle."""
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup, *argv]


class DiskThrottleSession:
    """``with DiskThrottleSession(throttle, data_dir, run_command) as cgroup:`` — the cgroup
    exists inside the block and is removed after it, also on failure."""

    def __init__(self, throttle: DiskThrottle, data_dir: str, run: Callable[..., object], tag: str = "0"):
        self.throttle, self.run = throttle, run
        self.device = device_of(data_dir)
        self.cgroup = cgroup_path(tag)

    def __enter__(self) -> str:
        try:
            for cmd in setup_commands(self.cgroup, self.device, self.throttle):
                self.run(cmd, timeout=30)
        except BaseException:
            self._remove()
            raise
        return self.cgroup

    def __exit__(self, *exc) -> None:
        self._remove()

    def _remove(self) -> None:
        if Path(self.cgroup).exists():
            for cmd in teardown_commands(self.cgroup):
                self.run(cmd, timeout=30, check=False)
