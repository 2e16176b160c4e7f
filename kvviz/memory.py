"""The old name of kvviz.memory_bill, kept for one release: import from kvviz.memory_bill.

The memory bill's files share the lesson's stem since issue 15 (lessons/memory_bill.py,
kvviz/memory_bill.py, kvviz/viz/memory_bill_figures.py); DESIGN.md's
`from kvviz.memory import kv_cache_bytes, ModelShape, PRESETS` still works through this module.
"""

from kvviz.memory_bill import (ACCELERATORS, DTYPE_BYTES, FULL, KIND_LABELS, MLA, PRESETS, SLIDING,  # noqa: F401
                               AttentionVariant, BillLine, GiB, ModelShape, TensorParallelShare, bill_breakdown,
                               bytes_per_token_by_kind, cache_budget_bytes, check_positive,
                               compare_attention_variants, dtype_bytes, fit_summary, format_bytes, get_preset,
                               kv_bytes_per_token, kv_cache_bytes, kv_cache_bytes_per_layer, max_cached_tokens,
                               max_context, max_requests, memory_bytes, shape_from_pretrained,
                               tensor_parallel_share, this_machine_bytes, tokens_held, weights_bytes)
