#!/usr/bin/env python3
"""Gloo's all-reduce through torch.distributed, on the sizes and process count bench_allreduce
measures across processes: 2 processes on this host (Gloo's transport there is loopback TCP), f32
tensors from 4 KB up, figures as nccl-tests defines them (bus bandwidth = bytes / time x 2(n-1)/n).

    python3 bench/allreduce_reference.py [--quick] [--processes N]

Each process keeps one intra-op thread (torch.set_num_threads(1)), as bench_allreduce's ranks do.
Prints a line per size and one JSON object as its last line: gloo_procs2_ms_<bytes>,
gloo_procs2_busbw_gbps_<bytes>. Needs PyTorch with its distributed package (pip install torch);
without it, it says so and exits 0.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

from torch_peer import import_torch, restart_keeping_memory

QUICK_SIZES = [4096, 1 << 20, 16 << 20, 64 << 20]
FULL_SIZES = [4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def calls_for(nbytes, quick):
    """As bench_allreduce: enough calls that a small size is not one message's latency alone."""
    if nbytes <= 65536:
        return 200 if quick else 1000
    return 10 if nbytes <= (4 << 20) else 2


def rank_main(rank, world, port, sizes, reps, quick, queue):
    torch = import_torch("allreduce_reference.py")
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {}
    for nbytes in sizes:
        n = nbytes // 4
        value = torch.randn(n, generator=torch.Generator().manual_seed(rank))
        calls = calls_for(nbytes, quick)
        times = []
        for rep in range(reps + 1):  # the first is a warm-up
            inputs = [value.clone() for _ in range(calls)]
            dist.barrier()
            t0 = time.perf_counter()
            for t in inputs:
                dist.all_reduce(t)
            took = (time.perf_counter() - t0) / calls
            if rep > 0:
                times.append(took)
        out[nbytes] = statistics.median(times)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    restart_keeping_memory()
    torch = import_torch("allreduce_reference.py")
    if torch is None:
        return 0
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available() or not dist.is_gloo_available():
        print("allreduce_reference.py: this PyTorch has no Gloo backend (pip install torch); skipping")
        return 0
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    reps = 3 if args.quick else 7
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, args.processes, port, sizes, reps, args.quick, queue))
             for r in range(args.processes)]
    for p in procs:
        p.start()
    seconds = queue.get(timeout=600)
    for p in procs:
        p.join()
    n = args.processes
    figures = {"bench": "allreduce_reference", "torch": torch.__version__, "processes": n}
    tag = f"gloo_procs{n}_"
    for nbytes in sizes:
        s = seconds[nbytes]
        busbw = nbytes / s / 1e9 * 2 * (n - 1) / n
        figures[f"{tag}ms_{nbytes}"] = s * 1e3
        figures[f"{tag}busbw_gbps_{nbytes}"] = busbw
        print(f"gloo, {n} processes, {nbytes:9d} bytes: {s * 1e3:8.3f} ms, busbw {busbw:6.2f} GB/s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
