"""The learner's memory from the C allocator: freed tensor memory kept for the next minibatch.

torch takes a CPU tensor's memory from the C library's `malloc`. glibc serves blocks above its mmap
threshold (128 KiB, raised by itself up to 32 MiB as it sees them freed) with fresh pages from the
kernel and gives the top of its heap back once more than the trim threshold is free there. A PPO
minibatch allocates the same large blocks every step: the frames as floats (256 × 4 × 84 × 84 × 4 B
= 29 MB), each layer's activations and their gradients. So each step got its memory back from the
kernel as new pages, and the kernel zeroes every page on first touch: tens of thousands of page
faults a step. Keeping freed memory in the heap lets the next step reuse it with no fault at all
(what that saves is measured in docs/benchmarks.md, "What each choice in the loop buys").

Results do not change: only where the bytes live does. The cost is that the process keeps its
peak heap (a few hundred MB for the defaults) instead of returning it between minibatches.
"""

from __future__ import annotations

import ctypes
import os
import sys

# glibc's mallopt parameters (<malloc.h>)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's ceiling for the mmap threshold on 64-bit (4 MiB × sizeof(long)): blocks up to this size,
# the default minibatch's float frames (29 MB) among them, come from the heap and are reused.
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
# Free heap beyond this at the top is given back: far above one update's working set.
TRIM_THRESHOLD = 1024 * 1024 * 1024

USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks up to 32 MiB in this process's heap for reuse, rather than give
    them back to the kernel; True if it took effect. Nothing is changed where the C library is not
    glibc, or where the user set one of glibc's variables for this (`USER_SETTINGS`: theirs is the
    choice then).
    Safe to call more than once."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in USER_SETTINGS):
        return False
    libc = ctypes.CDLL(None)  # the C library this interpreter already runs on
    if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: their mallopt does not do this
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
