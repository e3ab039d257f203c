"""What the GPU probes in tools/ share: writing their JSON, timing a step with CUDA events."""
import json
import os


def write_json_atomically(path, doc):
    """Writes `doc` to `path` through a temporary file, so an interrupted run leaves none half
    written."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def mean_ms(step, reps):
    """The mean milliseconds of `step()` over `reps` back-to-back calls on the current stream,
    timed with CUDA events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def parser(doc):
    """An argument parser described by the probe's docstring's first paragraph, taking OUT."""
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("out")
    return p


def require_gpu(probe):
    """Exits with one line when PyTorch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"{probe}: no CUDA GPU")
