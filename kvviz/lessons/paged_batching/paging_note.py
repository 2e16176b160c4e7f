""""Paging, explained": the virtual-memory analogy, for the Paged cache lesson (one call on the page)."""

from __future__ import annotations

import streamlit as st

ANALOGY = [
    ("a process's virtual address space", "a request's token positions 0, 1, 2, …"),
    ("a page (4 KiB)", "a block (block_size tokens of K and V, in every layer)"),
    ("a physical page frame", "a physical block in the pool"),
    ("the page table", "the block table: logical block i → physical block id"),
    ("a page fault: map a frame on first touch", "a full last block: take one free block from the pool"),
    ("shared pages (copy-on-write)", "shared prefix blocks, counted by reference"),
    ("swapping a process out to disk, and back in",
     ("preemption: copy a request's blocks to CPU memory and back (swap mode), or free them and recompute "
      "them when it resumes (the default)")),
]


def paging_explained(expanded: bool = False) -> None:
    """Why blocks and block tables, said as an operating system says it."""
    with st.expander("Paging, explained: the cache as virtual memory", expanded=expanded):
        st.markdown(
            "An operating system gives each process the illusion of one long, contiguous memory while "
            "the real memory is scattered fixed-size **pages**, found through a **page table**; nothing "
            "is reserved ahead, a page is mapped when it is first needed. PagedAttention does the same "
            "for the KV cache: a request sees positions 0 to n, the engine stores them in whatever "
            "blocks are free, and attention reads them back through the block table.")
        st.table([{"operating system": os_side, "paged KV cache": cache_side} for os_side, cache_side in ANALOGY])
        st.markdown(
            "**Paging is not caching.** Paging decides *where* a request's keys and values live: memory is "
            "taken one block at a time as tokens arrive, so nothing is reserved ahead and the only unused "
            "room is the empty slots of each request's last block (its slack). It does not keep anything "
            "that would otherwise be thrown away. **Prefix caching builds on it:** because a block is an "
            "addressable unit with a hash of the tokens it holds, a new request whose prompt starts with the "
            "same tokens can point its block table at the existing blocks instead of computing them again.")
