"""NCHW -> NHWC copies, the ones capture's conv_layouts.py adds before a 16-bit convolution: pipec's
flat kernels against its 2-d tiled ones (codegen tiling.py, option `tiled_transposes`), eager
(`contiguous(memory_format=channels_last)`) and TorchInductor, in one process on the GPU.

    python benchmarks/transpose_copies.py --out $OUT/transpose_copies.json

The shapes are Stable Diffusion 1.5's UNet's (batch 2, 64 x 64 latents, bf16): activations before
its convs and its conv weights. Each case is a group norm's SiLU output stored channels-last
(what the copy fuses with in the UNet) and a bare weight copy. Per backend: the time
(`triton.testing.do_bench`, us), the bandwidth of reading and writing the tensor once (TB/s),
and a check against eager (exact: a copy; the SiLU at bf16 tolerance).
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

# (name, shape): activations [N, C, H, W] and weights [O, I, kh, kw] of SD 1.5's UNet
CASES = [
    ("act 2x320x64x64", (2, 320, 64, 64)),
    ("act 2x640x32x32", (2, 640, 32, 32)),
    ("act 2x1280x16x16", (2, 1280, 16, 16)),
    ("weight 320x320x3x3", (320, 320, 3, 3)),
    ("weight 1280x1280x3x3", (1280, 1280, 3, 3)),
    ("weight 1280x2560x3x3", (1280, 2560, 3, 3)),
]


def silu_nhwc(x):
    """SiLU stored [N, H, W, C] (the storage of x's channels-last layout, as conv_layouts.py asks)."""
    return F.silu(x).permute(0, 2, 3, 1).contiguous()


def copy_nhwc(x):
    return x.permute(0, 2, 3, 1).contiguous()


def compiled(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn)
    import pipec
    return pipec.compile(fn, tiled_transposes=backend == "pipec-tiled")


def main() -> None:
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="eager,inductor,pipec,pipec-tiled")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("transpose_copies.py times GPU kernels: no CUDA device here")
    rows = []
    for name, shape in CASES:
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
        for fn in ((silu_nhwc,) if name.startswith("act") else ()) + (copy_nhwc,):
            expected = fn(x)
            row = {"case": name, "op": fn.__name__}
            for backend in args.backends.split(","):
                torch._dynamo.reset()
                f = compiled(backend, fn)
                got = f(x)
                torch.testing.assert_close(got, expected, **({} if fn is copy_nhwc else dict(rtol=1.6e-2, atol=1e-2)))
                us = do_bench(lambda f=f, x=x: f(x)) * 1000
                row[backend] = {"us": round(us, 2), "TB/s": round(2 * x.numel() * x.element_size() / us / 1e6, 3)}
            rows.append(row)
            print(row["case"], row["op"], " ".join(f"{b} {row[b]['us']} us" for b in args.backends.split(",")),
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
