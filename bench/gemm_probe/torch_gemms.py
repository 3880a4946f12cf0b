#!/usr/bin/env python3
"""The GEMMs of bench/gemm_probe/forward.bmp through PyTorch on the GPU, as
the ceiling bmc's cuBLASLt calls are held to (scripts/gpu-check's profile
stage runs both). bf16 inputs; C in bf16 (what torch autocast writes) and,
where this torch has mm's out_dtype, in fp32 (what bmc writes today).
Prints one JSON object: per GEMM, milliseconds (median of 10 after 3
warm-ups, CUDA events) and TFLOP/s."""

import json
import statistics

import torch

SHAPES = {  # name: (batch, m, k, n, A transposed)
    "qkv": (1, 8192, 1024, 3072, False),
    "mlp up": (1, 8192, 1024, 4096, False),
    "mlp down": (1, 8192, 4096, 1024, False),
    "lm head": (1, 8192, 1024, 51200, False),
    "weight grad": (1, 1024, 8192, 4096, True),
    "scores": (128, 1024, 64, 1024, False),
}


def time_ms(fn) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "gemms": {}}
    for name, (batch, m, k, n, trans_a) in SHAPES.items():
        a = torch.randn((batch, k, m) if trans_a else (batch, m, k), device="cuda",
                        dtype=torch.bfloat16)
        b = torch.randn((batch, k, n), device="cuda", dtype=torch.bfloat16)
        lhs = (lambda: a.transpose(1, 2)) if trans_a else (lambda: a)
        flops = 2.0 * batch * m * k * n
        row = {}
        ms = time_ms(lambda: torch.bmm(lhs(), b))
        row["bf16_out_ms"], row["bf16_out_tflops"] = ms, flops / ms / 1e9
        try:
            a2, b2 = lhs()[0], b[0]
            if batch == 1:
                ms = time_ms(lambda: torch.mm(a2, b2, out_dtype=torch.float32))
                row["fp32_out_ms"], row["fp32_out_tflops"] = ms, flops / ms / 1e9
        except (TypeError, RuntimeError) as e:
            row["fp32_out"] = f"not available: {str(e).splitlines()[0][:120]}"
        out["gemms"][name] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
