"""Peak dense FLOP/s of accelerators by name and precision, for MFU (model FLOPs utilization =
the FLOPs a step's model needs x steps per second / the devices' peak), as torchtitan's
``get_peak_flops`` keeps them. Figures are the vendors' datasheets, dense (no 2:4 sparsity):
NVIDIA H100/H200 (SXM 989.4 TFLOP/s bf16; PCIe 756; NVL 835), A100 (312), L40S (362),
B200 (2250). ``fp32`` is the non-tensor-core float32 rate, the one PyTorch's default float32
matmuls run at (``torch.backends.cuda.matmul.allow_tf32`` is off by default).

A device not in the table (every CPU) has no peak, and no MFU is shown for it: a guessed peak
would be a made-up number.
"""
from __future__ import annotations

#: (name fragment, {precision: FLOP/s}); the first fragment found in the device's name wins, so
#: the more specific names come first.
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756e12, "fp32": 51.2e12}),
    ("H100 NVL", {"bf16": 835e12, "fp32": 60e12}),
    ("H100", {"bf16": 989.4e12, "fp32": 66.9e12}),
    ("GH200", {"bf16": 989.4e12, "fp32": 66.9e12}),
    ("H200 NVL", {"bf16": 835e12, "fp32": 60e12}),
    ("H200", {"bf16": 989.4e12, "fp32": 66.9e12}),
    ("A100", {"bf16": 312e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp32": 91.6e12}),
    ("B200", {"bf16": 2250e12}),
)
#: A case's precision axis -> the peak it runs at.
PRECISION = {"off": "fp32", "bf16": "bf16"}


def peak_flops(device_name: str | None, amp: str) -> float | None:
    """The device's peak FLOP/s in the case's precision, or None where it is not known."""
    if not device_name:
        return None
    key = PRECISION.get(amp, amp)
    for fragment, peaks in PEAKS:
        if fragment in device_name:
            return peaks.get(key)
    return None


def mfu(tokens_per_s: float, flops_per_token: float, devices: int, peak: float | None) -> float | None:
    """The fraction of ``devices`` x ``peak`` FLOP/s that training at ``tokens_per_s`` uses."""
    if not peak or devices < 1:
        return None
    return tokens_per_s * flops_per_token / (devices * peak)
