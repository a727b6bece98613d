#!/usr/bin/env python3
"""PyTorch on the two training steps bench_train_step times, same machine and thread count:

  MLP 784-512-512-10 (ReLU), batch 256, Adam (lr 1e-3);
  CNN 32x32x3 -> conv3x3 32 -> maxpool 2 -> conv3x3 64 -> maxpool 2 -> dense 128 -> dense 10,
  'same' padding, ReLU, batch 128, SGD (lr 0.01, momentum 0.9);

forward, cross-entropy, backward and the optimizer step, on synthetic data in memory, as many steps
as bench_train_step times (--quick included). Eager PyTorch and torch.compile (Inductor, the model
compiled; its build is a warm-up, not timed) alternate round by round. Prints the median step times
and one JSON object as its last line.

    python3 bench/torch_train_reference.py [--quick] [--threads N] [--rounds R] [--no-compile]

Needs PyTorch (Debian: apt-get install python3-torch, run with /usr/bin/python3; or pip install
torch); without it, it says so and exits 0. It restarts itself with glibc's malloc told to keep
freed memory (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_), PyTorch's strongest setting here.
"""

import argparse
import json
import os
import statistics
import sys
import time

from torch_peer import import_torch, restart_keeping_memory

# The steps bench_train_step times (after two warm-up steps each): the comparison is step for step.
OUR_STEPS = {"mlp": {"quick": 15, "full": 50}, "cnn": {"quick": 5, "full": 50}}


def step_times_s(torch, model, optimizer, x, y, steps):
    """Seconds of each of `steps` training steps, after two warm-up steps."""
    loss_fn = torch.nn.CrossEntropyLoss()
    seconds = []
    for s in range(steps + 2):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        took = time.perf_counter() - t0
        if s >= 2:  # the first two warm caches and the allocator (and, compiled, trace and build)
            seconds.append(took)
    return seconds


def summary_ms(seconds):
    return 1e3 * statistics.median(seconds), 1e3 * min(seconds), 1e3 * max(seconds)


def make_mlp(nn):
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def make_cnn(nn):
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 8 * 64, 128), nn.ReLU(), nn.Linear(128, 10))


def time_variants(torch, name, make_model, make_optimizer, x, y, steps, rounds, with_compile):
    """Eager and (if asked and it works) torch.compile, alternated round by round so that both see
    the same machine load; returns {variant: [step seconds over all rounds]}."""
    torch.manual_seed(1)
    eager = make_model()
    variants = {"eager": (eager, make_optimizer(eager))}
    if with_compile:
        torch.manual_seed(1)
        plain = make_model()
        try:
            compiled = torch.compile(plain)
            optimizer = make_optimizer(plain)
            step_times_s(torch, compiled, optimizer, x, y, 1)  # traces and builds the kernels
            variants["compiled"] = (compiled, optimizer)
        except Exception as failure:  # no C++ compiler, an unsupported Python, ...
            print(f"torch_train_reference: torch.compile of the {name} failed "
                  f"({type(failure).__name__}: {failure}); eager only")
    seconds = {v: [] for v in variants}
    for _ in range(rounds):
        for v, (model, optimizer) in variants.items():
            seconds[v] += step_times_s(torch, model, optimizer, x, y, steps)
    return seconds


def main():
    restart_keeping_memory()
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternations of eager and compiled, each timing as many steps as ours")
    parser.add_argument("--no-compile", action="store_true", help="eager PyTorch only")
    args = parser.parse_args()
    torch = import_torch("torch_train_reference")
    if torch is None:
        return 0
    torch.set_num_threads(args.threads)
    mode = "quick" if args.quick else "full"
    with_compile = not args.no_compile and hasattr(torch, "compile")
    nn = torch.nn
    torch.manual_seed(1)
    mlp_x, mlp_y = torch.rand(256, 784), torch.randint(0, 10, (256,))
    cnn_x, cnn_y = torch.rand(128, 3, 32, 32), torch.randint(0, 10, (128,))
    results = {
        "mlp": time_variants(torch, "MLP", lambda: make_mlp(nn),
                             lambda m: torch.optim.Adam(m.parameters(), lr=1e-3), mlp_x, mlp_y,
                             OUR_STEPS["mlp"][mode], args.rounds, with_compile),
        "cnn": time_variants(torch, "CNN", lambda: make_cnn(nn),
                             lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), cnn_x, cnn_y,
                             OUR_STEPS["cnn"][mode], args.rounds, with_compile),
    }
    summary = {"bench": "torch_train_reference", "torch": torch.__version__, "threads": args.threads,
               "mlp_steps": OUR_STEPS["mlp"][mode], "cnn_steps": OUR_STEPS["cnn"][mode], "rounds": args.rounds}
    for model, label in (("mlp", "MLP Adam b256"), ("cnn", "CNN SGD b128")):
        for variant, seconds in results[model].items():
            median, low, high = summary_ms(seconds)
            print(f"PyTorch {torch.__version__} {variant}, {args.threads} threads: {label} {median:.2f} ms per step "
                  f"({low:.2f}-{high:.2f}, {len(seconds)} steps)")
            key = f"torch_{model}_step_ms" if variant == "eager" else f"torch_{model}_{variant}_step_ms"
            summary[key] = round(median, 3)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
