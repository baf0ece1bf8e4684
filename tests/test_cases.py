from __future__ import annotations

import pytest

from perfsuite.faces import options
from perfsuite import suite
from perfsuite.bench import allreduce
from perfsuite.records.errors import ConfigError
from perfsuite.records.model import Case, format_size


def test_default_sweep_is_13_sizes_from_4B_to_64MiB():
    sizes = allreduce.parse_sizes(allreduce.DEFAULT_SIZES)
    assert len(sizes) == 13 and sizes[0] == 4 and sizes[-1] == 64 << 20


@pytest.mark.parametrize("text,expected", [
    ("4,1024,1048576", (4, 1024, 1 << 20)),
    ("4:64", (4, 16, 64)),
    ("4:64:2", (4, 8, 16, 32, 64)),
    ("1KiB,1M,2MiB", (1024, 1 << 20, 2 << 20)),
    ("8,8,16", (8, 16)),
])
def test_parse_sizes(text, expected):
    assert allreduce.parse_sizes(text) == expected


@pytest.mark.parametrize("text,dtype,needle", [
    ("0", "float32", "size 0"),
    ("6", "float32", "size 6 is not a multiple of 4"),
    ("4", "float64", "size 4 is not a multiple of 8"),
    ("12XB", "float32", "'12XB' is not a byte count"),
    ("64:4", "float32", "MIN <= MAX"),
    ("4:64:1", "float32", "factor '1'"),
    ("4", "bfloat8", "dtype 'bfloat8'"),
])
def test_bad_sizes_name_the_value(text, dtype, needle):
    with pytest.raises(ConfigError, match=needle):
        allreduce.parse_sizes(text, dtype)


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5", ""])
def test_bad_world_sizes(text):
    with pytest.raises(ConfigError, match="world size"):
        options.parse_world_sizes(text)


def test_unknown_transport_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"transport 'infiniband' is unknown; choose from mpi, ring"):
        options.selection({"transports": "mpi,infiniband"})


def test_one_world_per_transport_and_world_size():
    cs = allreduce.allreduce_cases(["mpi", "ring"], [2, 3], [4, 1024])
    worlds = suite.plan(cs)
    assert [(w.transport, w.world_size, len(w.cases)) for w in worlds] == [
        ("mpi", 2, 2), ("mpi", 3, 2), ("ring", 2, 2), ("ring", 3, 2)]


def test_case_ids():
    assert Case("allreduce", "mpi", 2, size_bytes=1 << 20).name == "allreduce[mpi-n2-1MiB]"
    assert Case("allreduce", "ring", 4, size_bytes=8, dtype="float64").id == "ring-n4-8B-float64"
    assert format_size(1536) == "1536B"


@pytest.mark.parametrize("values,needle", [
    ({"timeout": "0"}, "timeout '0'"),
    ({"iters": "x"}, "iterations 'x'"),
    ({"launcher": "pbsrun"}, "launcher 'pbsrun'"),
    ({"mpi_flavor": "lam"}, "MPI flavor 'lam'"),
    ({"env": ["NOEQUALS"]}, "NAME=VALUE"),
    ({"hostfile": "/no/such/hostfile"}, "does not exist"),
])
def test_bad_suite_options(values, needle):
    with pytest.raises(ConfigError, match=needle):
        options.suite_config(values)


def test_option_reference_in_docs_is_generated_from_the_options():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "options.md").read_text()
    assert docs == options.reference_markdown(), (
        "docs/options.md is out of date: python -m perfsuite.faces.options > docs/options.md")
    assert all(f"| `{o.name}` |" in docs for o in options.all_options())
