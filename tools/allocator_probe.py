#!/usr/bin/env python3
"""What one retry of PyTorch's caching allocator costs (moeplan's allocator_retry_us).

    python3 tools/allocator_probe.py OUT.json [--segments-mib 256,1024,4096] [--reps 3]

An allocation that finds no cached block it fits and no free HBM makes PyTorch's allocator free
its whole cache (cudaFree of every cached segment, which synchronizes the device) and call
cudaMalloc again. The simulator charges that stall to each allocation past MemFine's
alpha x capacity that still fits the GPU. Here the cache is filled with segments of one size
until about 1 GiB of HBM is left, they are freed (cached, not returned), and a block larger than
both a segment and the free HBM is asked for; the wall time of that call, the device idle before
it, is one retry. torch.cuda.memory_stats' num_alloc_retries confirms each. For comparison: the
same request with an empty cache (one cudaMalloc) and again from the cache (no driver call).
Needs PyTorch and a CUDA GPU; writes OUT.json atomically and prints a table.
"""
import statistics
import time

import torch

from probe_util import parser, require_gpu, write_json_atomically

MIB = 1 << 20


def alloc_seconds(nbytes):
    """Wall time of one allocation of `nbytes`, the device idle before and after."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    return time.perf_counter() - start, t


def one_retry(segment, leave):
    """Fills the cache with `segment`-byte blocks, frees them, asks for more than is free."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    count = max(1, (free - leave) // segment)
    blocks = [torch.empty(segment, dtype=torch.uint8, device="cuda") for _ in range(count)]
    del blocks  # cached by the allocator, still held from the driver
    free_after, _ = torch.cuda.mem_get_info()
    request = max(segment, free_after) + 256 * MIB
    retries = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    seconds, t = alloc_seconds(request)
    retried = torch.cuda.memory_stats().get("num_alloc_retries", 0) - retries
    del t
    return {"segments": count, "cached_bytes": count * segment, "request_bytes": request,
            "seconds": seconds, "retries": retried}


def main():
    ap = parser(__doc__)
    ap.add_argument("--segments-mib", default="256,1024,4096")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--leave-mib", type=int, default=1024)
    args = ap.parse_args()
    require_gpu("allocator_probe")
    torch.empty(1, device="cuda")  # context
    result = {"tool": "tools/allocator_probe.py", "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "hbm_bytes": torch.cuda.mem_get_info()[1], "cases": []}
    for mib in (int(s) for s in args.segments_mib.split(",")):
        segment = mib * MIB
        runs = [one_retry(segment, args.leave_mib * MIB) for _ in range(args.reps)]
        request = runs[0]["request_bytes"]
        malloc = []
        for _ in range(args.reps):
            torch.cuda.empty_cache()  # the request goes to cudaMalloc
            malloc.append(alloc_seconds(request)[0])
        _, keep = alloc_seconds(request)
        del keep  # now cached
        cached = [alloc_seconds(request)[0] for _ in range(args.reps)]
        result["cases"].append({
            "segment_bytes": segment, "runs": runs,
            "retry_seconds_median": statistics.median(r["seconds"] for r in runs),
            "cudamalloc_seconds_median": statistics.median(malloc),
            "cached_seconds_median": statistics.median(cached),
        })
        torch.cuda.empty_cache()
    write_json_atomically(args.out, result)

    print(f"{'segment':>9} {'segments':>8} {'cached GB':>9} {'request GB':>10} {'retry ms':>9} "
          f"{'retries':>7} {'cudaMalloc ms':>13} {'from cache ms':>13}")
    for c in result["cases"]:
        r = c["runs"][0]
        print(f"{c['segment_bytes'] // MIB:6} MiB {r['segments']:8} {r['cached_bytes'] / 1e9:9.1f} "
              f"{r['request_bytes'] / 1e9:10.1f} {c['retry_seconds_median'] * 1e3:9.2f} "
              f"{min(x['retries'] for x in c['runs']):7} {c['cudamalloc_seconds_median'] * 1e3:13.3f} "
              f"{c['cached_seconds_median'] * 1e3:13.3f}")


if __name__ == "__main__":
    main()
