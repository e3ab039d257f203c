#!/usr/bin/env python3
"""Host copies beside compute: the rate activation offloading gets, and what it costs the compute.

    python3 tools/offload_probe.py OUT.json [--mib 256] [--seconds 2]

The planner and the simulator run activation offloading's copies (a layer's saved inputs to
pinned host memory in the forward, back in the backward) on copy streams at the pinned-copy rate
(calibration curves pcie_d2h and pcie_h2d) while the layer's compute runs at its own pace. This
times each side alone and then both at once, on separate streams:

- copies: device to pinned host (D2H), pinned host to device (H2D), MIB each, back to back;
- compute: a BF16 8192^3 matrix product (tensor cores) and an element-wise add over 1 GiB
  (HBM-bound), back to back.

Each side runs for SECONDS with the other side running the whole time, then reports its rate
beside its rate alone. Inputs are random, never zeros. Needs PyTorch and a CUDA GPU; writes
OUT.json atomically and prints a table.
"""
import platform

import torch

from probe_util import mean_ms, parser, require_gpu, write_json_atomically


def timed(stream, step, seconds):
    """Enqueues step() on `stream` back to back for about `seconds` without waiting for it;
    returns the call count and the events around them."""
    with torch.cuda.stream(stream):
        step()  # warm-up
        # Size the batch from one timed call so the loop enqueues without host waits.
        calls = max(3, int(seconds / max(mean_ms(step, 1) / 1e3, 1e-6)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(calls):
            step()
        end.record()
    return calls, start, end


def run_alone(stream, step, seconds):
    calls, start, end = timed(stream, step, seconds)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def run_together(copy_stream, copy, compute_stream, compute, seconds):
    """Both sides enqueued at once, each sized to about `seconds`; returns each side's seconds
    a call and how long after the copies the compute started (its own warm-up and sizing)."""
    copy_calls, cs, ce = timed(copy_stream, copy, seconds)
    compute_calls, ks, ke = timed(compute_stream, compute, seconds)
    torch.cuda.synchronize()
    copy_s = cs.elapsed_time(ce) / 1e3
    compute_s = ks.elapsed_time(ke) / 1e3
    return copy_s / copy_calls, compute_s / compute_calls, cs.elapsed_time(ks) / 1e3


def main():
    ap = parser(__doc__)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    require_gpu("offload_probe")
    dev = torch.device("cuda")
    n = args.mib << 20
    gpu_buf = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
    host_buf = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host_buf.random_(0, 255)
    gpu_in = torch.empty(n, dtype=torch.uint8, device=dev)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1 << 29, device=dev, dtype=torch.bfloat16)  # 1 GiB
    y = torch.randn(1 << 29, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)

    copies = {
        "d2h": lambda: host_buf.copy_(gpu_buf, non_blocking=True),
        "h2d": lambda: gpu_in.copy_(host_buf, non_blocking=True),
    }
    computes = {
        "gemm_bf16_8192": (lambda: torch.mm(a, b, out=c), 2 * 8192**3, "flop"),
        "add_1gib": (lambda: torch.add(x, y, out=z), 3 * x.numel() * 2, "byte"),
    }
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    result = {
        "tool": "tools/offload_probe.py",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cpu": platform.processor(),
        "copy_bytes": n,
        "seconds": args.seconds,
        "alone": {},
        "together": [],
    }
    for name, step in copies.items():
        t = run_alone(copy_stream, step, args.seconds)
        result["alone"][name] = {"seconds": t, "GBps": n / t / 1e9}
    for name, (step, work, unit) in computes.items():
        t = run_alone(compute_stream, step, args.seconds)
        result["alone"][name] = {"seconds": t, "rate": work / t, "unit": unit}
    for cname, cstep in copies.items():
        for kname, (kstep, work, unit) in computes.items():
            copy_t, compute_t, lag = run_together(copy_stream, cstep, compute_stream, kstep,
                                                  args.seconds)
            alone_copy = result["alone"][cname]["seconds"]
            alone_compute = result["alone"][kname]["seconds"]
            result["together"].append({
                "copy": cname, "compute": kname,
                "copy_GBps": n / copy_t / 1e9,
                "copy_rate_vs_alone": alone_copy / copy_t,
                "compute_rate_vs_alone": alone_compute / compute_t,
                "compute_start_lag_s": lag,
            })
    write_json_atomically(args.out, result)

    print(f"{'copy':5} {'compute':16} {'copy GB/s alone':>15} {'beside':>8} {'copy rate':>9} "
          f"{'compute rate':>12}")
    for r in result["together"]:
        print(f"{r['copy']:5} {r['compute']:16} "
              f"{result['alone'][r['copy']]['GBps']:15.1f} {r['copy_GBps']:8.1f} "
              f"{r['copy_rate_vs_alone']:9.3f} {r['compute_rate_vs_alone']:12.3f}")
    for name, (_, _, unit) in computes.items():
        rate = result["alone"][name]["rate"]
        shown = f"{rate / 1e12:.0f} TFLOP/s" if unit == "flop" else f"{rate / 1e12:.2f} TB/s"
        print(f"{name} alone: {shown}")


if __name__ == "__main__":
    main()
