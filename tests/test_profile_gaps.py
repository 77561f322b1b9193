"""benchmarks/profile_kernels.py --gaps: the idle time between a call's kernels, by the kinds of
the kernels around it (where a CUDA Graph's replay loses time its kernels do not account for)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from profile_kernels import kernel_gaps, kernel_kind  # noqa: E402

CUDA = torch.autograd.DeviceType.CUDA


def kernel(name, start, end, device=CUDA):
    return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end))


def test_kinds():
    assert kernel_kind("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT") == "library gemm"
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert kernel_kind("pipec_fused_mm_add_gelu_363_pingpong") == "gluon gemm"
    assert kernel_kind("pipec_fused_mm_add_tanh_730_mm_epilogue") == "triton gemm"
    assert kernel_kind("pipec_fused_add_identity_cast_sum_30") == "generated"
    assert kernel_kind("triton_per_fused_add_native_layer_norm_view_2") == "generated"
    assert kernel_kind("Memset (Unknown)") == "memset"


def test_gaps_are_summed_per_call_by_the_kinds_around_them():
    # two calls: gemm -> norm (gap 2), norm -> gemm (gap 1); then a call boundary of 100 us
    events = [kernel("nvjet_a", 0, 10), kernel("pipec_norm", 12, 15), kernel("nvjet_a", 16, 26),
              kernel("pipec_norm", 28, 30),
              kernel("nvjet_a", 130, 140), kernel("pipec_norm", 142, 145), kernel("nvjet_a", 146, 156),
              kernel("pipec_norm", 157.5, 160),
              kernel("cpu_op", 0, 1000, device=torch.autograd.DeviceType.CPU)]  # not a kernel: ignored
    gaps = kernel_gaps(events, calls=2)
    pairs = {(r["before"], r["after"]): r for r in gaps["pairs"]}
    assert pairs[("library gemm", "generated")]["count"] == 2  # 4 gaps over 2 calls
    assert pairs[("library gemm", "generated")]["us"] == (2 + 2 + 2 + 1.5) / 2
    assert pairs[("generated", "library gemm")]["us"] == (1 + 1) / 2
    assert gaps["us"] == (7.5 + 2) / 2
    assert [g["us"] for g in gaps["long"]] == [100]


def test_an_overlap_is_a_negative_gap():
    events = [kernel("pipec_a", 0, 10), kernel("pipec_b", 9, 20)]  # b started before a ended (PDL)
    assert kernel_gaps(events, calls=1)["pairs"][0]["min_us"] == -1
