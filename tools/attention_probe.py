#!/usr/bin/env python3
"""Fused causal attention's share of the BF16 peak (moeplan's attention_core constant).

    python3 tools/attention_probe.py OUT.json [--peak-tflops 989.5] [--reps 10] [--calibration CAL.json]
    python3 tools/attention_probe.py --from OUT.json --calibration CAL.json

Times PyTorch's scaled_dot_product_attention through cuDNN's fused kernel (what Transformer
Engine runs in Megatron-Core on Hopper) and FlashAttention-2, forward and backward, with CUDA
events, at the head counts and dimensions the validated runs have per GPU: 128-dim heads
(Qwen3-235B-A22B at TP 2 and 4, 4K to 32K tokens) and DeepSeek-V3's multi-latent heads
(192-dim queries and keys, 128-dim values, 64 heads at TP 2). Efficiency is counted as moeplan
counts it: the forward's model FLOPs with causal blocks skipped (s^2 h (d_qk + d_v) per
sequence; twice that for the whole blocks of context parallelism's ring steps) and a backward
of twice that, over the time and the peak. The kernel is checked
against PyTorch's math attention on a small case first. Writes OUT.json atomically and a
table to stdout.

--calibration writes what moeplan reads (`plan --calibration CAL.json`): the `attention_core`
curve from cuDNN's causal 128-dim calls by forward FLOPs, and `attention_latent`, what the
multi-latent calls kept of that curve. --from converts an earlier OUT.json without a GPU.
"""
import argparse
import json
import statistics
import sys
import time

import math

from probe_util import write_json_atomically


def make(b, h, s, d_qk, d_v, grad=True):
    # Megatron keeps [s, b, h, d] / [b, s, h, d]; the kernel sees [b, h, s, d] views.
    import torch

    q = torch.randn(b, s, h, d_qk, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(b, s, h, d_qk, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(b, s, h, d_v, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    return [t.detach().requires_grad_(grad) for t in (q, k, v)]


def check(backend):
    """Relative error against the math backend in float32 on a small causal case."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q, k, v = make(1, 4, 512, 128, 128, grad=False)
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def time_case(backend, b, h, s, d_qk, d_v, causal, reps, warmup=3):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q, k, v = make(b, h, s, d_qk, d_v)
    grad = torch.randn(b, s, h, d_v, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    fwd, bwd = [], []
    with sdpa_kernel(backend):
        for r in range(warmup + reps):
            for t in (q, k, v):
                t.grad = None
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            e1.record()
            out.backward(grad)
            e2.record()
            torch.cuda.synchronize()
            if r >= warmup:
                fwd.append(e0.elapsed_time(e1) * 1e-3)
                bwd.append(e1.elapsed_time(e2) * 1e-3)
    return statistics.median(fwd), statistics.median(bwd)


def calibration(result):
    """The moeplan-calibration/1 document of a probe's result (see the module's docstring)."""
    by_flops = {}
    latent = []
    for c in result["cases"]:
        if c.get("backend") != "cudnn" or not c.get("causal", True) or "combined_eff" not in c:
            continue
        if c["d_qk"] == c["d_v"]:
            by_flops.setdefault(float(c["forward_flops"]), []).append(c["combined_eff"])
        else:
            latent.append(c)
    points = sorted((f, sum(e) / len(e)) for f, e in by_flops.items())
    if len(points) < 2:
        sys.exit("attention_probe: fewer than two cuDNN causal 128-dim measurements to make a curve of")

    def curve(flops):  # moeplan's interpolation: linear in log size, flat above, constant time below
        if flops <= points[0][0]:
            return points[0][1] * flops / points[0][0]
        for (f0, e0), (f1, e1) in zip(points, points[1:]):
            if flops <= f1:
                t = (math.log(flops) - math.log(f0)) / (math.log(f1) - math.log(f0))
                return e0 + t * (e1 - e0)
        return points[-1][1]

    doc = {
        "format": "moeplan-calibration/1",
        "provenance": {k: result.get(k) for k in ("tool", "date", "gpu", "torch", "cudnn")},
        "curves": {
            "attention_core": {
                "unit": "forward FLOPs per call",
                "reference_GFLOPS": result["peak_tflops"] * 1e3,
                "note": "cuDNN fused causal attention (PyTorch SDPA), forward + backward counted "
                "as 3x the forward's FLOPs, 128-dim heads",
                "points": [{"size_flops": f, "efficiency": e} for f, e in points],
            }
        },
    }
    if latent:
        kept = [c["combined_eff"] / curve(c["forward_flops"]) for c in latent]
        doc["constants"] = {"attention_latent": min(1.0, sum(kept) / len(kept))}
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="where the measurements go")
    ap.add_argument("--from", dest="source", help="convert this earlier OUT.json instead of measuring")
    ap.add_argument("--calibration", help="also write a moeplan calibration file here")
    ap.add_argument("--peak-tflops", type=float, default=989.5, help="dense BF16 peak (H100/H200)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if args.source:
        if not args.calibration:
            sys.exit("attention_probe: --from converts to --calibration FILE; name one")
        try:
            with open(args.source) as f:
                result = json.load(f)
            doc = calibration(result)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"attention_probe: {args.source}: {type(e).__name__}: {e}")
        write_json_atomically(args.calibration, doc)
        return
    if not args.out:
        sys.exit("attention_probe: name OUT.json (or --from an earlier one)")
    import torch
    from torch.nn.attention import SDPBackend

    if not torch.cuda.is_available():
        sys.exit("attention_probe: no CUDA GPU visible to PyTorch")
    torch.manual_seed(0)
    peak = args.peak_tflops * 1e12
    cases = [  # (label, batch, heads, seq, d_qk, d_v, causal)
        ("qwen3 tp2", 1, 32, 4096, 128, 128, True),
        ("qwen3 tp2", 1, 32, 8192, 128, 128, True),
        ("tp8", 1, 8, 4096, 128, 128, True),
        ("mbs4 tp4", 4, 16, 4096, 128, 128, True),
        ("mla tp2", 1, 64, 4096, 192, 128, True),
        ("mla tp2", 1, 64, 8192, 192, 128, True),
        ("mla tp2", 1, 64, 16384, 192, 128, True),
        ("mla tp4", 1, 32, 4096, 192, 128, True),
    ]
    for s in (1024, 2048, 4096, 8192, 16384, 32768, 65536):
        cases.append(("qwen3 tp4", 1, 16, s, 128, 128, True))
    # Context parallelism's ring steps: whole (non-causal) blocks of s / (2 cp) queries.
    for s in (2048, 4096, 8192, 16384):
        cases.append(("cp block", 1, 16, s, 128, 128, False))
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    result = {
        "tool": "tools/attention_probe.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "peak_tflops": args.peak_tflops,
        "checks": {},
        "cases": [],
    }
    print(f"{result['gpu']}, torch {torch.__version__}, cuDNN {result['cudnn']}, peak {args.peak_tflops} TFLOP/s")
    for name, backend in backends:
        try:
            result["checks"][name] = check(backend)
            print(f"{name}: relative error against math attention {result['checks'][name]:.2e}")
        except Exception as e:
            result["checks"][name] = f"{type(e).__name__}: {e}"
            print(f"{name}: check failed: {type(e).__name__}: {str(e)[:200]}")
    print(f"{'backend':<7} {'case':<10} {'b':>2} {'heads':>5} {'seq':>6} {'d':>7} {'fwd ms':>8} {'bwd ms':>8} "
          f"{'fwd eff':>7} {'bwd eff':>7} {'fwd+bwd':>7}")
    for name, backend in backends:
        if not isinstance(result["checks"].get(name), float):
            continue
        if name == "flash":  # FlashAttention-2 only as a reference point: what Megatron does not run
            cases = [c for c in cases if c[4] == c[5] and c[3] in (4096, 16384)]
        for label, b, h, s, d_qk, d_v, causal in cases:
            flops = b * h * s * s * (d_qk + d_v) * (1 if causal else 2)  # forward
            row = {"backend": name, "case": label, "batch": b, "heads": h, "seq": s,
                   "d_qk": d_qk, "d_v": d_v, "causal": causal, "forward_flops": flops}
            try:
                f, g = time_case(backend, b, h, s, d_qk, d_v, causal, args.reps)
                row.update(forward_s=f, backward_s=g, forward_eff=flops / f / peak,
                           backward_eff=2 * flops / g / peak, combined_eff=3 * flops / (f + g) / peak)
                print(f"{name:<7} {label:<10} {b:>2} {h:>5} {s:>6} {d_qk:>3}/{d_v:<3} {f * 1e3:>8.3f} {g * 1e3:>8.3f} "
                      f"{row['forward_eff']:>7.3f} {row['backward_eff']:>7.3f} {row['combined_eff']:>7.3f}")
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
                print(f"{name:<7} {label:<10} {b:>2} {h:>5} {s:>6} {d_qk:>3}/{d_v:<3} failed: {type(e).__name__}: {str(e)[:80]}")
            result["cases"].append(row)
            torch.cuda.empty_cache()
    write_json_atomically(args.out, result)
    if args.calibration:
        write_json_atomically(args.calibration, calibration(result))


if __name__ == "__main__":
    main()
