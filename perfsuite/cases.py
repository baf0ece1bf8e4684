"""The case matrix: one source of truth for pytest, the CLI and asv.

Parsing turns user strings into checked values at the boundary; each bad value raises a
``ConfigError`` whose one line names the value and what would be right.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .errors import ConfigError
from .model import Case, WorldSpec

DTYPES = {"float32": 4, "float64": 8, "float16": 2, "int32": 4}
DEFAULT_SIZES = "4:64MiB"
DEFAULT_SIZE_FACTOR = 4  # 4 B .. 64 MiB by x4 is 13 sizes, a 2-rank sweep that fits in seconds
DEFAULT_WORLD_SIZES = (2,)
DEFAULT_DTYPE = "float32"

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, what: str = "size") -> int:
    """'4' -> 4, '1MiB' -> 1048576, '64M' -> 67108864 (binary units, as OMB and nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"{what} {text!r} is not a byte count; use e.g. 4, 1024, 1KiB, 1MiB, 64MiB")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_sizes(text: str, dtype: str = DEFAULT_DTYPE) -> tuple[int, ...]:
    """Sizes as '4,1024,1048576', a range '4:64MiB' (x4 steps) or '4:64MiB:2' (factor 2)."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is unknown; choose from {', '.join(DTYPES)}")
    sizes: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part:
            bits = part.split(":")
            if len(bits) not in (2, 3):
                raise ConfigError(f"size range {part!r} must be MIN:MAX or MIN:MAX:FACTOR, e.g. 4:64MiB")
            lo, hi = parse_size(bits[0]), parse_size(bits[1])
            factor = DEFAULT_SIZE_FACTOR
            if len(bits) == 3:
                if not bits[2].strip().isdigit() or int(bits[2]) < 2:
                    raise ConfigError(f"size factor {bits[2]!r} in {part!r} must be a whole number >= 2")
                factor = int(bits[2])
            if lo < 1 or hi < lo:
                raise ConfigError(f"size range {part!r} needs 1 <= MIN <= MAX")
            s = lo
            while s <= hi:
                sizes.append(s)
                s *= factor
        else:
            sizes.append(parse_size(part))
    if not sizes:
        raise ConfigError(f"sizes {text!r} name no size; use e.g. 4,1024 or 4:64MiB")
    itemsize = DTYPES[dtype]
    for s in sizes:
        if s <= 0:
            raise ConfigError(f"size {s} is not allowed; sizes must be >= {itemsize} bytes")
        if s % itemsize:
            raise ConfigError(f"size {s} is not a multiple of {itemsize} bytes ({dtype}); "
                              f"use a multiple such as {max(itemsize, s - s % itemsize)}")
    return tuple(dict.fromkeys(sizes))  # keep order, drop repeats


def parse_world_sizes(text: str | Iterable[int]) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); every world size is a whole number >= 1."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for p in parts:
        s = str(p).strip()
        if not s:
            continue
        if not s.lstrip("-").isdigit() or int(s) < 1:
            raise ConfigError(f"world size {s!r} is not allowed; world sizes are whole numbers >= 1")
        out.append(int(s))
    if not out:
        raise ConfigError(f"world sizes {text!r} name none; use e.g. 2 or 1,2,4")
    return tuple(dict.fromkeys(out))


def parse_names(text: str | Sequence[str], known: Iterable[str], what: str) -> tuple[str, ...]:
    """Comma list checked against ``known``; 'all' selects every known name."""
    known = list(known)
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    if parts == ["all"]:
        return tuple(known)
    for p in parts:
        if p not in known:
            raise ConfigError(f"{what} {p!r} is unknown; choose from {', '.join(known)} (or all)")
    if not parts:
        raise ConfigError(f"no {what} given; choose from {', '.join(known)}")
    return tuple(dict.fromkeys(parts))


def parse_dtypes(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, DTYPES, "dtype")


def allreduce_cases(transports: Sequence[str], world_sizes: Sequence[int],
                    sizes: Sequence[int], dtypes: Sequence[str] = (DEFAULT_DTYPE,)) -> list[Case]:
    """transport x world size x dtype x size, in the order worlds run (sizes innermost)."""
    cases = []
    for t in transports:
        for n in world_sizes:
            for dt in dtypes:
                itemsize = DTYPES[dt]
                for s in sizes:
                    if s % itemsize:
                        raise ConfigError(f"size {s} is not a multiple of {itemsize} bytes ({dt})")
                    cases.append(Case("allreduce", t, n, size_bytes=s, dtype=dt))
    return cases


DEFAULT_MODELS = "small-cnn"  # the CPU CI model; mobilenet and resnet50 on request
DEFAULT_BATCHES = "32"


def parse_batches(text: str | Iterable[int]) -> tuple[int, ...]:
    """'32,64' -> (32, 64): per-worker batch sizes, whole numbers >= 1."""
    from .kernels.tf_models import check_batch  # plain data, no TensorFlow import

    parts = [p for p in (str(text).split(",") if isinstance(text, str) else list(text)) if str(p).strip()]
    if not parts:
        raise ConfigError(f"batches {text!r} name none; use e.g. 32 or 16,32,64")
    return tuple(dict.fromkeys(check_batch(p) for p in parts))


def tf_cases(transports: Sequence[str], world_sizes: Sequence[int],
             models: str | Sequence[str] = DEFAULT_MODELS,
             batches: str | Sequence[int] = DEFAULT_BATCHES) -> list[Case]:
    """transport x world size x model x per-worker batch (batches innermost: one world per
    transport, world size and model sweeps its batches)."""
    from .kernels.tf_models import MODELS

    picked = parse_names(models, MODELS, "model")
    sizes = parse_batches(batches)
    return [Case("tf-epoch", t, n, model=m, batch=b)
            for t in transports for n in world_sizes for m in picked for b in sizes]


def group_worlds(cases: Iterable[Case], options: dict | None = None) -> list[WorldSpec]:
    """One world per (benchmark, transport, world size, ...): it runs that world's whole sweep."""
    worlds: dict[tuple, list[Case]] = {}
    for c in cases:
        worlds.setdefault(c.world_key, []).append(c)
    return [WorldSpec(cs[0].benchmark, cs[0].transport, cs[0].world_size, tuple(cs), dict(options or {}))
            for cs in worlds.values()]
