#!/usr/bin/env python3
"""How fast a GPU runs GEMMs when they fill only part of its time (the power limit's clock).

    python3 tools/power_probe.py OUT.json [--seconds 6] [--period-ms 20]

Back to back, an H100's BF16 GEMMs pull it to its power limit and its SM clock down (moeplan
calibrate --sustain). A training step leaves gaps (communication waits, memory-bound kernels),
so its GEMMs may run at a clock between that and the boost clock. This runs a BF16 8192^3 GEMM
loop for DUTY of every PERIOD and, for the rest, either leaves the GPU idle or runs an HBM-bound
add, for SECONDS per case; it times each GEMM block with events and reads the SM clock and the
power through NVML every few milliseconds. Reported per case: the GEMMs' median TFLOP/s over
the second half, and the median SM clock and power over it. Needs PyTorch, nvidia-ml-py and a
CUDA GPU; writes OUT.json atomically and prints a table.
"""
import statistics
import time

import pynvml
import torch

from probe_util import mean_ms, parser, require_gpu, write_json_atomically


def main():
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--period-ms", type=float, default=20.0)
    args = ap.parse_args()
    require_gpu("power_probe")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    z = torch.empty_like(x)
    flops = 2.0 * n**3
    for _ in range(20):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    gemm_ms = mean_ms(lambda: torch.mm(a, b, out=c), 10)
    add_ms = mean_ms(lambda: torch.add(x, y, out=z), 10)

    cases = [(1.0, "none"), (0.75, "idle"), (0.5, "idle"), (0.25, "idle"), (0.5, "add")]
    result = {"tool": "tools/power_probe.py", "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "period_ms": args.period_ms,
              "seconds": args.seconds, "gemm_ms_cool": gemm_ms, "cases": []}
    for duty, filler in cases:
        gemms = max(1, round(duty * args.period_ms / gemm_ms))
        rest_ms = args.period_ms * (1 - duty)
        adds = round(rest_ms / add_ms) if filler == "add" else 0
        blocks, samples = [], []
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(gemms):
                torch.mm(a, b, out=c)
            e.record()
            for _ in range(adds):
                torch.add(x, y, out=z)
            e.synchronize()
            now = time.perf_counter() - t0
            blocks.append((now, s.elapsed_time(e) / gemms))
            samples.append((now, pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3))
            torch.cuda.synchronize()  # the adds, where there are any
            if filler == "idle":
                time.sleep(rest_ms / 1e3)
        half = args.seconds / 2
        late = [ms for t, ms in blocks if t > half]
        late_samples = [(clk, w) for t, clk, w in samples if t > half]
        result["cases"].append({
            "gemm_duty": duty, "filler": filler, "gemms_per_period": gemms,
            "adds_per_period": adds,
            "gemm_tflops_median": flops / (statistics.median(late) / 1e3) / 1e12,
            "sm_clock_mhz_median": statistics.median(clk for clk, _ in late_samples),
            "power_w_median": statistics.median(w for _, w in late_samples),
        })
        time.sleep(1.0)  # let it cool a little between cases
    write_json_atomically(args.out, result)
    print(f"cool GEMM {flops / gemm_ms / 1e9:.0f} TFLOP/s ({gemm_ms:.3f} ms)")
    print(f"{'GEMM duty':>9} {'filler':>6} {'GEMM TFLOP/s':>12} {'SM MHz':>7} {'power W':>8}")
    for r in result["cases"]:
        print(f"{r['gemm_duty']:9.2f} {r['filler']:>6} {r['gemm_tflops_median']:12.0f} "
              f"{r['sm_clock_mhz_median']:7.0f} {r['power_w_median']:8.0f}")


if __name__ == "__main__":
    main()
