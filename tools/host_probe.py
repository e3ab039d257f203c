#!/usr/bin/env python3
"""What a framework's CPU spends issuing one transformer layer's kernels (moeplan's host time).

    python3 tools/host_probe.py OUT.json [--tokens 256] [--reps 30]

Runs plain-PyTorch eager versions of the parts moeplan prices host time for (planner/host_time.h:
attention, router, experts, dense FFN) at a size whose kernels take a few microseconds, so that the
wall time of a forward or a backward is the time the CPU takes to issue it. Each part is timed
forward (until the last kernel is issued; the router's token counts come back to the host first,
as Megatron's dispatcher copies them) and backward (until autograd has issued the last kernel),
median of the repeats after a warm-up. The experts run as a Python loop over the local experts
(Megatron's SequentialMLP) and, where PyTorch has it, as one grouped GEMM (torch._grouped_mm, the
shape of Transformer Engine's GroupedLinear), at several local-expert counts. Kernels per pass
come from the profiler; the cost of one eager op from a loop of tiny adds.

This is a floor for Megatron-Core, not its cost: Transformer Engine's modules, hooks, the EP
all-to-alls and their bookkeeping add to it. The JSON keeps every number; a table goes to stdout.
Needs PyTorch and a CUDA GPU; writes OUT.json atomically.
"""
import argparse
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from probe_util import write_json_atomically


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class Attention(torch.nn.Module):
    """RMSNorm, QKV, rotary, flash attention, output projection, residual."""

    def __init__(self, h, heads, head_dim):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.qkv = torch.nn.Linear(h, 3 * heads * head_dim, bias=False)
        self.proj = torch.nn.Linear(heads * head_dim, h, bias=False)

    def forward(self, x):
        t = x.shape[0]
        y = F.rms_norm(x, (x.shape[-1],), self.norm)
        q, k, v = self.qkv(y).view(t, 3, self.heads, self.head_dim).unbind(1)
        pos = torch.arange(t, device=x.device, dtype=torch.float32)
        freq = torch.outer(pos, torch.ones(self.head_dim // 2, device=x.device))
        cos, sin = freq.cos().to(x.dtype)[:, None, :], freq.sin().to(x.dtype)[:, None, :]

        def rope(u):
            a, b = u[..., : self.head_dim // 2], u[..., self.head_dim // 2 :]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

        q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True
        )
        return x + self.proj(o[0].transpose(0, 1).reshape(t, -1))


class Router(torch.nn.Module):
    """Router GEMM, softmax, top-k, the load-balancing loss, and the token counts on the host."""

    def __init__(self, h, experts, topk):
        super().__init__()
        self.topk = topk
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.gate = torch.nn.Linear(h, experts, bias=False)

    def forward(self, x):
        y = F.rms_norm(x, (x.shape[-1],), self.norm)
        scores = torch.softmax(self.gate(y).float(), dim=-1)
        probs, idx = torch.topk(scores, self.topk, dim=-1)
        probs = probs / probs.sum(dim=-1, keepdim=True)
        counts = torch.bincount(idx.flatten(), minlength=scores.shape[-1])
        aux = (counts.float() / idx.numel() * scores.mean(0)).sum() * scores.shape[-1]
        host_counts = counts.tolist()  # the dispatcher's device-to-host copy: drains the queue
        return y, probs.to(x.dtype), idx, host_counts, aux


class Experts(torch.nn.Module):
    """Permute by expert, gated FFN per local expert (a loop, or one grouped GEMM), unpermute."""

    def __init__(self, h, ffn, experts, grouped):
        super().__init__()
        self.grouped = grouped
        # Stored [E, out, in] as Linear weights are; the products read them transposed.
        self.up = torch.nn.Parameter(torch.randn(experts, 2 * ffn, h) * h**-0.5)
        self.down = torch.nn.Parameter(torch.randn(experts, h, ffn) * ffn**-0.5)

    def forward(self, x, y, probs, idx, counts):
        order = torch.argsort(idx.flatten(), stable=True)
        rows = torch.index_select(y, 0, order // idx.shape[1])
        if self.grouped:
            offs = torch.tensor(counts, device=x.device, dtype=torch.int32).cumsum(0, dtype=torch.int32)
            up, down = self.up.transpose(-2, -1), self.down.transpose(-2, -1)
            a, b = torch._grouped_mm(rows, up, offs=offs).chunk(2, dim=-1)
            out = torch._grouped_mm(F.silu(a) * b, down, offs=offs)
        else:
            parts = []
            for e, chunk in enumerate(torch.split(rows, counts)):
                a, b = (chunk @ self.up[e].t()).chunk(2, dim=-1)
                parts.append((F.silu(a) * b) @ self.down[e].t())
            out = torch.cat(parts)
        weighted = out * probs.flatten()[order, None]
        return x + torch.zeros_like(x).index_add(0, order // idx.shape[1], weighted)


class DenseFfn(torch.nn.Module):
    def __init__(self, h, ffn):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.up = torch.nn.Linear(h, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        a, b = self.up(F.rms_norm(x, (x.shape[-1],), self.norm)).chunk(2, dim=-1)
        return x + self.down(F.silu(a) * b)


class MoeBlock(torch.nn.Module):
    def __init__(self, h, ffn, experts, topk, grouped):
        super().__init__()
        self.router = Router(h, experts, topk)
        self.experts = Experts(h, ffn, experts, grouped)

    def forward(self, x):
        y, probs, idx, counts, aux = self.router(x)
        return self.experts(x, y, probs, idx, counts) + 0 * aux


def median_ms(values):
    return statistics.median(values) * 1e3


def time_passes(module, x, reps, warmup):
    """Forward and backward issue times (ms), and the whole step to completion."""
    fwd, bwd, step = [], [], []
    for r in range(warmup + reps):
        xi = x.detach().requires_grad_(True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = module(xi)
        t1 = time.perf_counter()
        out.float().sum().backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        if r >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            step.append(t3 - t0)
    return {"forward_ms": median_ms(fwd), "backward_ms": median_ms(bwd), "step_ms": median_ms(step)}


def kernels_per_step(module, x):
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        xi = x.detach().requires_grad_(True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            module(xi).float().sum().backward()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception as e:  # the profiler is a nice-to-have; the times stand without it
        print(f"  (kernel count unavailable: {type(e).__name__}: {e})", file=sys.stderr)
        return None


def eager_op_us(n=2000):
    a = torch.randn(16, device="cuda")
    b = torch.randn(16, device="cuda")
    c = torch.empty_like(a)
    for _ in range(100):
        torch.add(a, b, out=c)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        torch.add(a, b, out=c)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def graph_replay_ms(module, x, reps):
    """Forward captured in a CUDA graph and replayed: the host cost graphs leave."""
    static_x = x.detach().clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            module(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        module(static_x)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return median_ms(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("host_probe: no CUDA GPU visible to PyTorch")
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    h, heads, head_dim, ffn, topk = 1024, 8, 128, 512, 8
    x = torch.randn(args.tokens, h, device=dev, dtype=dt)
    result = {
        "tool": "tools/host_probe.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tokens": args.tokens,
        "hidden": h,
        "reps": args.reps,
        "eager_op_us": eager_op_us(),
        "parts": {},
    }
    print(f"{result['gpu']}, {result['cpu']} ({result['cpu_count']} threads), torch {torch.__version__}")
    print(f"one eager op issued: {result['eager_op_us']:.1f} us")

    parts = [
        ("attention", lambda: Attention(h, heads, head_dim)),
        ("dense_ffn", lambda: DenseFfn(h, 4 * ffn)),
        ("router", lambda: _RouterOnly(h, 64, topk)),
    ]
    for experts in (1, 4, 8, 16, 32):
        for grouped in (False, True):
            name = f"moe_{'grouped' if grouped else 'loop'}_{experts}"
            parts.append((name, lambda e=experts, g=grouped: MoeBlock(h, ffn, e, min(topk, e), g)))

    print(f"{'part':<20} {'forward ms':>10} {'backward ms':>11} {'step ms':>8} {'kernels':>8} {'graph fwd ms':>12}")
    for name, make in parts:
        try:
            module = make().to(dev, dt)
            r = time_passes(module, x, args.reps, args.warmup)
            r["kernels"] = kernels_per_step(module, x)
            try:
                r["graph_forward_ms"] = graph_replay_ms(module, x, args.reps) if "moe" not in name else None
            except Exception as e:
                r["graph_forward_ms"] = None
                print(f"  ({name}: no graph replay: {type(e).__name__}: {e})", file=sys.stderr)
        except Exception as e:  # one part failing (no _grouped_mm) leaves the others
            result["parts"][name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name:<20} failed: {type(e).__name__}: {e}")
            continue
        result["parts"][name] = r
        g = r["graph_forward_ms"]
        print(
            f"{name:<20} {r['forward_ms']:>10.3f} {r['backward_ms']:>11.3f} {r['step_ms']:>8.3f} "
            f"{str(r['kernels']):>8} {('-' if g is None else f'{g:.3f}'):>12}"
        )
    write_json_atomically(args.out, result)


class _RouterOnly(torch.nn.Module):
    """The router alone, its outputs folded into one tensor for the backward."""

    def __init__(self, h, experts, topk):
        super().__init__()
        self.router = Router(h, experts, topk)

    def forward(self, x):
        y, probs, idx, counts, aux = self.router(x)
        return y + probs.sum() + aux


if __name__ == "__main__":
    main()
