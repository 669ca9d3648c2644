#!/usr/bin/env python3
"""gpu_matmul_ref.py: cuBLAS's own GEMM rate on this GPU, through PyTorch, for
scripts/gpu-check.sh to set `ctrain bench matmul` against.

    python3 scripts/gpu_matmul_ref.py [--n 5000] [--repeats 10]

For each of fp32 (TF32 off), tf32, fp16 and bf16 it times C = A @ B on n x n
operands (torch.matmul, which calls cuBLAS) with CUDA events after two warm-up
products, and prints one JSON object: {"device": name, "torch": version, "n": n,
"gflops": {dtype: GFLOP/s from the median}}. Reduced-precision reductions are
off, as in ctrain's GEMMs (fp32 accumulation); PyTorch writes C in the input
dtype where ctrain writes fp32, which favours PyTorch slightly for fp16 and bf16.
Exits 77 when PyTorch or a CUDA device is missing (the caller reports the step as
skipped).
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("no PyTorch", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("PyTorch sees no CUDA device", file=sys.stderr)
        return 77
    n = args.n
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "n": n,
           "gflops": {}}
    kinds = {"fp32": (torch.float32, False), "tf32": (torch.float32, True),
             "fp16": (torch.float16, False), "bf16": (torch.bfloat16, False)}
    matmul = torch.backends.cuda.matmul
    for flag in ("allow_fp16_reduced_precision_reduction",
                 "allow_bf16_reduced_precision_reduction"):
        if hasattr(matmul, flag):
            setattr(matmul, flag, False)
    for name, (dtype, tf32) in kinds.items():
        matmul.allow_tf32 = tf32
        g = torch.Generator(device="cuda").manual_seed(42)
        a = (torch.rand(n, n, device="cuda", generator=g) * 2 - 1).to(dtype)
        b = (torch.rand(n, n, device="cuda", generator=g) * 2 - 1).to(dtype)
        for _ in range(2):
            torch.matmul(a, b)
        times = []
        for _ in range(args.repeats):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        out["gflops"][name] = 2.0 * n ** 3 / statistics.median(times) / 1e9
        del a, b
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
