#!/usr/bin/env python3
"""Random models and switches through `moeplan plan` and `moeplan simulate`: a crash hunt.

Usage: tools/hunt_random_plans.py [SEED] [COUNT] [--valgrind] [--gap PERCENT] [--keep DIR]

Each run writes a random model file (odd head counts, one layer, tiny experts, one-token
sequences, ...), plans it on a shipped cluster with a random set of switches, and simulates the
saved plan. It reports what a user must never see: an exit code other than 0, 1 or 3, an error
of more than one line, nan or inf in the output, a valgrind error (--valgrind), and a simulator
that disagrees with the planner by more than --gap percent (default 8.5, the shipped pairs'
worst). A report names the seed and index: the same seed rebuilds the same files, which
--keep leaves in DIR. Each saved plan that Megatron-LM runs as priced also goes back through
`plan --megatron-args` as its printed arguments, which must give the same plan. MOEPLAN names the binary (default build/tools/moeplan/moeplan; a sanitizer
build's must exit with codes of its own, e.g. ASAN_OPTIONS=exitcode=86, as 1 is an input error).
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("MOEPLAN", os.path.join(ROOT, "build", "tools", "moeplan", "moeplan"))
CLUSTERS = ["h100-sxm-8", "h100-256", "aptmoe-4x-a800-40gb-c1g2", "gb200-nvl72-4x64",
            "monta-2x8-a800"]
SWITCHES = [["--precision", "fp8"], ["--megatron-only"], ["--objective", "memory"],
            ["--skew", "worst"], ["--skew", "capacity=1.25"], ["--skew", "G=0.5"],
            ["--recompute", "full"], ["--recompute", "selective"], ["--recompute", "sar"],
            ["--parallel", "tp=2"], ["--parallel", "pp=2"], ["--parallel", "pp=4,vpp=2"],
            ["--parallel", "cp=2"], ["--gpus", "4"], ["--gpus", "16"], ["--cuda-graph", "attn"],
            ["--cuda-graph", "full"], ["--dispatcher", "deepep"], ["--dispatcher", "alltoall"],
            ["--overlap", "off"], ["--intra-overlap", "on"], ["--zero", "3"], ["--zero", "0"],
            ["--schedule", "gpipe"], ["--attention", "ulysses"], ["--offload-modules", "search"],
            ["--optimizer-offload", "0.5"], ["--attention-kernel", "unfused"],
            ["--permute-fusion", "off"], ["--grad-reduce", "fp32"], ["--adam-moments", "bf16"],
            ["--adam-moments", "fp8"]]


# What a bounds-checked lookup or a failed allocation says: moeplan's own errors name a file,
# field or option instead.
LIBRARY_ERROR = re.compile(r"_M_range_check|vector::|map::at|basic_string|bad_alloc|bad_optional")


def random_model(rng, index):
    heads = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32, 40, 64])
    kv = rng.choice([h for h in [1, 2, 4, 8, heads] if heads % h == 0])
    head_dim = rng.choice([32, 64, 80, 96, 128])
    m = {"format": "moeplan-model/1", "name": f"random-{index}",
         "num_layers": rng.choice([1, 2, 3, 5, 7, 16, 27, 61]),
         "hidden_size": rng.choice([heads * head_dim, 512, 1000, 2048, 2880, 4096, 7168]),
         "vocab_size": rng.choice([1000, 32000, 50257, 129280]),
         "tied_embeddings": rng.random() < 0.3,
         "attention": {"type": "gqa", "num_heads": heads, "num_kv_heads": kv,
                       "head_dim": head_dim, "bias": "none"},
         "ffn": {"gated": rng.random() < 0.7}}
    if rng.random() < 0.8:
        experts = rng.choice([1, 2, 3, 4, 8, 16, 60, 64, 128, 256])
        m["moe"] = {"routed_experts": experts,
                    "expert_size": rng.choice([128, 768, 1408, 2048, 14336]),
                    "top_k": rng.randint(1, min(experts, 8))}
        if rng.random() < 0.3:
            m["moe"]["shared_experts"] = rng.randint(1, 2)
        if rng.random() < 0.3:
            m["moe"]["first_dense_layers"] = rng.randint(0, m["num_layers"] - 1)
            m["ffn"]["dense_size"] = rng.choice([1024, 4096, 18432])
        if rng.random() < 0.3:
            m["mtp_layers"] = 1
    else:
        m["ffn"]["dense_size"] = rng.choice([1024, 4096, 11008])
    return m


ROUND_TRIPS = [0]  # plans sent back through plan --megatron-args


def megatron_round_trip(plan_file, model_file, cluster, extra, scratch, index, wrap):
    """The saved plan's Megatron-LM arguments, read back by plan --megatron-args, must give the
    same plan: its sizes, switches and iteration. Plans Megatron cannot run as priced (MegaScale
    or MemFine mechanisms, GPipe, APTMoE offload) are passed over. Returns a problem or None."""
    with open(plan_file) as f:
        saved = json.load(f)
    if (not saved.get("megatron_args") or saved.get("megatron_gaps")
            or saved.get("schedule") == "gpipe"):
        return None
    ROUND_TRIPS[0] += 1
    args_file = os.path.join(scratch, f"megatron-args-{index}.sh")
    with open(args_file, "w") as f:
        f.write(" \\\n".join(saved["megatron_args"]) + "\n")
    skew = extra[extra.index("--skew"):extra.index("--skew") + 2] if "--skew" in extra else []
    r = subprocess.run(wrap + [BIN, "plan", "--model", model_file, "--cluster", cluster,
                               "--gpus", str(saved["gpus"]), "--megatron-args", args_file,
                               "--json"] + skew, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return f"megatron-args round trip exited {r.returncode}: {r.stderr.strip()[:300]}"
    read = json.loads(r.stdout)["plans"][0]
    a = read["predicted"]["iteration_s"]
    b = saved["predicted"]["iteration_s"]
    # The same sizes, priced the same (the search's price and a fixed layout's agree to 2 ppm)
    # in the same memory; switch labels may differ where they price nothing (moe_act or the
    # dispatcher of a layout without experts to route, SP attention over one TP rank).
    mem_a = read["predicted"]["peak_bytes"] / 1e9
    mem_b = saved["predicted"]["peak_bytes"] / 1e9
    same = (read["parallel"] == saved["parallel"] and abs(a / b - 1) <= 1e-5
            and abs(mem_a - mem_b) <= 1e-9 * max(mem_a, mem_b))
    if not same:
        differ = [f"{k}: read {read[part].get(k)}, saved {saved[part].get(k)}"
                  for part in ("parallel", "switches")
                  for k in sorted(set(read[part]) | set(saved[part]))
                  if read[part].get(k) != saved[part].get(k)]
        return (f"megatron-args round trip: {a} s, {mem_a} GB against the saved {b} s, "
                f"{mem_b} GB; {'; '.join(differ)}")
    return None


def main():
    options = {"--gap", "--keep"}
    args = [a for i, a in enumerate(sys.argv[1:], 1)
            if not a.startswith("--") and sys.argv[i - 1] not in options]
    seed = int(args[0]) if args else 0
    count = int(args[1]) if len(args) > 1 else 30
    gap = float(sys.argv[sys.argv.index("--gap") + 1]) if "--gap" in sys.argv else 8.5
    wrap = ["valgrind", "-q", "--error-exitcode=99"] if "--valgrind" in sys.argv else []
    rng = random.Random(seed)
    found = 0
    codes = {}
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    if keep:
        os.makedirs(keep, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        scratch = keep or temporary
        for i in range(count):
            model = random_model(rng, i)
            model_file = os.path.join(scratch, f"model-{i}.json")
            with open(model_file, "w") as f:
                json.dump(model, f)
            cluster = os.path.join(ROOT, "topologies", rng.choice(CLUSTERS) + ".json")
            extra = []
            for switch in SWITCHES:
                if rng.random() < 0.12 and switch[0] not in extra:
                    extra += switch
            if "--precision" in extra and rng.random() < 0.5:
                extra += ["--fp8-recipe", rng.choice(["tensorwise", "blockwise", "mxfp8"])]
            plan_file = os.path.join(scratch, f"plan-{i}.json")
            plan = ["plan", "--model", model_file, "--cluster", cluster, "--global-batch",
                    str(rng.choice([1, 2, 7, 16, 64, 256])), "--seq-len",
                    str(rng.choice([1, 100, 2048, 4096, 32768])), "--top", "2",
                    "--save", plan_file] + extra
            where = f"seed {seed} index {i}: moeplan {' '.join(plan[1:])}\n  {json.dumps(model)}"
            r = subprocess.run(wrap + [BIN] + plan, capture_output=True, text=True, timeout=900)
            codes[r.returncode] = codes.get(r.returncode, 0) + 1
            out = r.stdout + r.stderr
            problem = None
            if r.returncode not in (0, 1, 3):
                problem = f"plan exited {r.returncode}"
            elif r.returncode != 0 and len(r.stderr.strip().splitlines()) != 1:
                problem = "plan's error is not one line"
            elif r.returncode != 0 and LIBRARY_ERROR.search(r.stderr):
                problem = "plan's error is the standard library's (an index past a table: a bug)"
            elif re.search(r"\bnan\b|\binf\b", out, re.IGNORECASE):
                problem = "plan printed nan or inf"
            if problem is None and r.returncode == 0:
                s = subprocess.run(wrap + [BIN, "simulate", "--model", model_file, "--cluster",
                                           cluster, "--plan", plan_file],
                                   capture_output=True, text=True, timeout=900)
                d = re.search(r"difference ([-+][0-9.]+) %", s.stdout)
                if s.returncode != 0 or LIBRARY_ERROR.search(s.stderr):
                    problem = f"simulate exited {s.returncode}: {s.stderr.strip()[:300]}"
                elif re.search(r"\bnan\b|\binf\b", s.stdout, re.IGNORECASE):
                    problem = "simulate printed nan or inf"
                elif d and abs(float(d.group(1))) > gap:
                    problem = f"simulator vs planner {d.group(1)} %"
                else:
                    problem = megatron_round_trip(plan_file, model_file, cluster, extra, scratch,
                                                  i, wrap)
            if problem:
                found += 1
                print(f"{problem}\n  {where}\n  {out.strip()[-400:] if r.returncode else ''}",
                      flush=True)
    print(f"seed {seed}: {count} runs, exit codes {dict(sorted(codes.items()))}, "
          f"{ROUND_TRIPS[0]} Megatron round trips, {found} found")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
