"""The machine's CPU as results and baseline system names record it, on x86 and on aarch64
(GH200's Grace has no "model name" in /proc/cpuinfo: its core is read from implementer and part)."""
from __future__ import annotations

import platform

from perfsuite.store import baselines, fingerprint

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de
"""
#: A Grace CPU of a GH200 node, as its kernel prints it (the first two of 72 cores).
GRACE = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve2 i8mm bf16 bti
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0

processor\t: 1
BogoMIPS\t: 2000.00
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""


def test_x86_keeps_its_model_name():
    assert fingerprint.cpu_model(X86, midr="") == "AMD EPYC 7B13"


def test_aarch64_names_the_core_from_implementer_and_part():
    assert fingerprint.cpu_model(GRACE, midr="") == "ARM Neoverse-V2"
    assert baselines.system_for({"cpu_model": fingerprint.cpu_model(GRACE, midr=""), "cpu_count": 72}) \
        == "arm-neoverse-v2-72c"
    graviton2 = GRACE.replace("0xd4f", "0xd0c")
    assert fingerprint.cpu_model(graviton2, midr="") == "ARM Neoverse-N1"


def test_an_unknown_core_is_named_by_its_numbers():
    assert fingerprint.cpu_model("CPU implementer\t: 0x41\nCPU part\t: 0xd99\n", midr="") == \
        "implementer 0x41 part 0xd99"
    assert fingerprint.cpu_model("CPU implementer\t: 0x6d\nCPU part\t: 0x0d4\n", midr="") == \
        "implementer 0x6d part 0x0d4"


def test_without_the_cpuinfo_fields_the_midr_register_names_it():
    # MIDR_EL1 of a Neoverse-V2: implementer 0x41 in bits 31:24, part 0xd4f in bits 15:4.
    assert fingerprint.cpu_model("processor\t: 0\n", midr="0x00000000410fd4f0\n") == "ARM Neoverse-V2"


def test_nothing_known_falls_back_to_the_platform():
    assert fingerprint.cpu_model("", midr="") == (platform.processor() or platform.machine())
    assert fingerprint.cpu_model("Hardware\t: BCM2835\n", midr="") == "BCM2835"
