#!/usr/bin/env python3
"""PyTorch on the chain bench_fusion times: y = gelu(x*a + b) * c on 16M float32 (a, b, c scalars).

Eager PyTorch (four kernels), TorchScript with the CPU fuser switched on, and torch.compile
(Inductor: one generated C++ kernel) where the installed PyTorch has it, on as many threads as
bench_fusion uses. Prints one JSON object as its last line.

    python3 bench/torch_fusion_reference.py [--quick] [--threads N] [--elements N]

Needs PyTorch (Debian: apt-get install python3-torch, then run it with /usr/bin/python3; or
pip install torch); without it, it says so and exits 0. It restarts itself with glibc's malloc
told to keep freed memory (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_): otherwise every 64 MB
temporary of eager PyTorch comes from fresh pages, which makes it 3-4x slower here.
"""

import argparse
import json
import os
import statistics
import sys
import time

from torch_peer import import_torch, restart_keeping_memory


def time_calls(fn, reps):
    """Median seconds of `reps` calls after three warm-up calls."""
    for _ in range(3):
        fn()
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def main():
    restart_keeping_memory()
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--elements", type=int, default=1 << 24)
    args = parser.parse_args()
    torch = import_torch("torch_fusion_reference")
    if torch is None:
        return 0

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x = torch.empty(args.elements, dtype=torch.float32).uniform_(-3.0, 3.0)
    a, b, c = torch.tensor(1.5), torch.tensor(-0.25), torch.tensor(0.75)

    def chain(x, a, b, c):
        return torch.nn.functional.gelu(x * a + b) * c

    # TorchScript fuses elementwise chains on the CPU only when asked to, and only in builds with
    # its LLVM backend (Debian's has none): then it runs the scripted graph unfused.
    fused = hasattr(torch._C, "_jit_override_can_fuse_on_cpu")
    if fused:
        torch._C._jit_override_can_fuse_on_cpu(True)
    scripted = torch.jit.script(chain)
    reps = 7 if args.quick else 21
    with torch.no_grad():
        for _ in range(3):  # warm-up; the profiling executor specialises after a few calls
            chain(x, a, b, c)
            try:
                scripted(x, a, b, c)
            except RuntimeError as failure:
                if not fused:
                    raise
                print(f"torch_fusion_reference: TorchScript cannot fuse on this CPU build ({failure}); unfused")
                fused = False
                torch._C._jit_override_can_fuse_on_cpu(False)
                scripted = torch.jit.script(chain)
                scripted(x, a, b, c)
        eager_s, script_s = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            chain(x, a, b, c)
            eager_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            scripted(x, a, b, c)
            script_s.append(time.perf_counter() - t0)
        worst = (chain(x, a, b, c) - scripted(x, a, b, c)).abs().max().item()

        # torch.compile (PyTorch 2): Inductor writes one vectorised C++ loop for the chain.
        compile_ms = None
        if hasattr(torch, "compile"):
            try:
                compiled = torch.compile(chain)
                compiled(x, a, b, c)
                worst = max(worst, (chain(x, a, b, c) - compiled(x, a, b, c)).abs().max().item())
                compile_ms = 1e3 * time_calls(lambda: compiled(x, a, b, c), reps)
            except Exception as failure:  # no C++ toolchain for Inductor, say
                print(f"torch_fusion_reference: torch.compile failed ({type(failure).__name__}: {failure}); skipped")

    eager_ms = 1e3 * statistics.median(eager_s)
    script_ms = 1e3 * statistics.median(script_s)
    compiled_text = f", torch.compile {compile_ms:.2f} ms" if compile_ms is not None else ""
    print(f"PyTorch {torch.__version__}, {args.threads} threads, {args.elements} f32: eager {eager_ms:.2f} ms, "
          f"TorchScript{'' if fused else ' (unfused)'} {script_ms:.2f} ms{compiled_text} (max difference {worst:.3g})")
    result = {"bench": "torch_fusion_reference", "torch": torch.__version__, "threads": args.threads,
              "elements": args.elements, "torch_eager_ms": round(eager_ms, 3),
              "torchscript_ms": round(script_ms, 3), "torchscript_fused": fused}
    if compile_ms is not None:
        result["torch_compile_ms"] = round(compile_ms, 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
