#!/usr/bin/env python3
"""PyTorch on the chain bench_fusion times: y = gelu(x*a + b) * c on 16M float32 (a, b, c scalars).

Eager PyTorch (four kernels) and TorchScript with the CPU fuser switched on (its strongest CPU
mode), on as many threads as bench_fusion uses. Prints one JSON object as its last line.

    python3 bench/torch_fusion_reference.py [--quick] [--threads N] [--elements N]

Needs PyTorch (Debian: apt-get install python3-torch, then run it with /usr/bin/python3); without
it, it says so and exits 0.
"""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--elements", type=int, default=1 << 24)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_fusion_reference: PyTorch is not installed (apt-get install python3-torch, or pip install "
              "torch); skipping")
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

    eager_ms = 1e3 * statistics.median(eager_s)
    script_ms = 1e3 * statistics.median(script_s)
    print(f"PyTorch {torch.__version__}, {args.threads} threads, {args.elements} f32: eager {eager_ms:.2f} ms, "
          f"TorchScript{'' if fused else ' (unfused)'} {script_ms:.2f} ms (max difference {worst:.3g})")
    print(json.dumps({"bench": "torch_fusion_reference", "torch": torch.__version__, "threads": args.threads,
                      "elements": args.elements, "torch_eager_ms": round(eager_ms, 3),
                      "torchscript_ms": round(script_ms, 3), "torchscript_fused": fused}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
