"""What the PyTorch reference scripts share: running PyTorch at its strongest on this machine.

glibc's malloc returns large freed blocks to the system, so without these settings every large
temporary of eager PyTorch comes from fresh pages (3-4x slower here); they must be in the
environment before the process starts, hence the restart.
"""

import os
import sys

KEEP_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def restart_keeping_memory():
    """Re-executes this script with KEEP_MEMORY in its environment, unless it is there already."""
    if any(os.environ.get(k) != v for k, v in KEEP_MEMORY.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **KEEP_MEMORY})


def import_torch(script):
    """PyTorch, or None after saying that it is absent and how to get it."""
    try:
        import torch
    except ImportError:
        print(f"{script}: PyTorch is not installed (apt-get install python3-torch, or pip install torch); skipping")
        return None
    return torch
