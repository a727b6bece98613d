#!/usr/bin/env python3
"""PyTorch on the two training steps bench_train_step times, same machine and thread count:

  MLP 784-512-512-10 (ReLU), batch 256, Adam (lr 1e-3);
  CNN 32x32x3 -> conv3x3 32 -> maxpool 2 -> conv3x3 64 -> maxpool 2 -> dense 128 -> dense 10,
  'same' padding, ReLU, batch 128, SGD (lr 0.01, momentum 0.9);

forward, cross-entropy, backward and the optimizer step, on synthetic data in memory. Prints the
median step times and one JSON object as its last line.

    python3 bench/torch_train_reference.py [--quick] [--threads N]

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

def median_step_ms(torch, model, optimizer, x, y, steps):
    loss_fn = torch.nn.CrossEntropyLoss()
    seconds = []
    for s in range(steps + 2):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        took = time.perf_counter() - t0
        if s >= 2:  # the first two warm caches and the allocator
            seconds.append(took)
    return 1e3 * statistics.median(seconds), 1e3 * min(seconds), 1e3 * max(seconds)


def main():
    restart_keeping_memory()
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch = import_torch("torch_train_reference")
    if torch is None:
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    steps = 15 if args.quick else 50
    nn = torch.nn

    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    mlp_ms = median_step_ms(torch, mlp, torch.optim.Adam(mlp.parameters(), lr=1e-3), torch.rand(256, 784),
                            torch.randint(0, 10, (256,)), steps)

    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(8 * 8 * 64, 128), nn.ReLU(), nn.Linear(128, 10))
    cnn_ms = median_step_ms(torch, cnn, torch.optim.SGD(cnn.parameters(), lr=0.01, momentum=0.9),
                            torch.rand(128, 3, 32, 32), torch.randint(0, 10, (128,)), steps)

    print(f"PyTorch {torch.__version__}, {args.threads} threads: MLP Adam b256 {mlp_ms[0]:.2f} ms per step "
          f"({mlp_ms[1]:.2f}-{mlp_ms[2]:.2f}), CNN SGD b128 {cnn_ms[0]:.2f} ms ({cnn_ms[1]:.2f}-{cnn_ms[2]:.2f})")
    print(json.dumps({"bench": "torch_train_reference", "torch": torch.__version__, "threads": args.threads,
                      "torch_mlp_step_ms": round(mlp_ms[0], 3), "torch_cnn_step_ms": round(cnn_ms[0], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
