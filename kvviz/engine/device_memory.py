"""How much memory a device has free for new tensors: what the pool, the packed CPU weights and the pages'
bounds size themselves by."""

from __future__ import annotations

import os

import torch


def available_memory_bytes(device: torch.device) -> int:
    """Memory free for new tensors on `device`: free GPU memory, or the host's available RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
