"""Layer groups: the layers that attend alike share one block table (vLLM v1's KV cache groups).

Most models attend to the whole context in every layer: one group, and the engine works as it
always has. Some layers attend to the last `window` positions only: Gemma-2 alternates sliding
and full layers 1:1, Gemma-3 has 5 sliding layers to 1 full, Mistral-style models slide in every
layer. Those layers form a sliding group. Once a query has moved `window` tokens past a block, no
query to come will read that block again, so the sliding group gives it back to its pool while
the full group keeps the whole context. A request's sliding blocks then stay flat past the window
(about window / block_size + 1 of them) while its full blocks grow with the context.

How it is built, the simplest correct way:
- One BlockPool per group, each with a cache tensor of its own: block b of group g is
  storage_g[:, layer's index in g, b], so a group's blocks hold only its own layers and one id
  used by two groups names two different blocks. A copy-on-write copies only its group's layers.
- The pools share one memory budget: the bytes of `num_blocks` blocks of every layer, what a pool
  with one table would take (pool_sizes). A sliding group's pool gets what its requests can hold
  at once: each request about window / block_size + 2 blocks, plus the blocks of one step's new
  tokens. The bytes it does not take go to the full group, whose blocks grow with the context, so
  more requests fit at once in the same memory (Gemma-3's 5 sliding layers to 1 full: up to about
  6 times the full blocks). Should the sliding pool still run out, the scheduler preempts as it
  does for any pool; a smaller sliding pool also keeps fewer given-back blocks for prefix hits.
  Where the windows need every block anyway, each pool keeps num_blocks over one tensor, as
  before. A model without full layers (Mistral) keeps one pool of num_blocks: its given-back
  blocks serve any request already.
  Why not vLLM's way, one pool of blocks that each hold one group's share of the layers: it needs
  groups of equal layer counts, so Gemma-3 (5 sliding : 1 full) would become six groups of one
  layer, six tables per request and six views of every step. Two tables and two tensors read more
  simply; the price is a split fixed when the engine starts, which a very uneven load may not suit.
- A request's table in each group keeps its logical positions: table[i] holds tokens
  i*block_size..(i+1)*block_size-1. An entry given back is None, and the given-back entries are
  always the first ones. Attention never reads them: the compiled kernel reads only the positions
  inside the window, and the gathered (SDPA) path reads block 0 in their place, whose keys the
  window mask excludes.
- Blocks are given back when the KV manager next gives the request slots, before any new token
  runs: a block whose last position is before num_computed_tokens - window + 1 is outside the
  window of every query still to come.
- Prefix caching: every group registers the hashes of its full blocks, and a given-back block
  stays findable in its pool's free queue until it is evicted. A prefix hit is the shortest of
  the groups' hits; a sliding group takes back only the blocks of the hit that are inside the
  window of the first token it runs, its earlier entries stay None.
- Preemption recomputes: swapping to CPU memory moves one table per request, so the engine
  refuses preemption_mode "swap" for a model with a sliding group.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.engine.block_pool import BlockPool, blocks_needed


@dataclass(slots=True)
class LayerGroup:
    """Layers that share one block table, and the pool their blocks come from."""

    name: str  # "full" or "sliding"
    window: int | None  # a query sees the keys of its last `window` positions; None: all of them
    layers: list[int]
    pool: BlockPool

    def first_needed_block(self, num_computed_tokens: int, block_size: int) -> int:
        """Logical blocks before this one are outside the window of every query to come: the next
        query sits at position num_computed_tokens and sees keys from num_computed_tokens - window + 1."""
        if self.window is None:
            return 0
        return max(0, (num_computed_tokens - self.window + 1) // block_size)


def layer_windows(config) -> list[int | None]:
    """Each layer's sliding window from a model's (text) config; None for full attention.

    `layer_types` names each layer where the config has it (Gemma-2, Gemma-3, Qwen2); otherwise a
    set `sliding_window` applies to every layer (Mistral), unless `use_sliding_window` is off. The
    runner checks at every step that each layer attends with the window given here.
    """
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return [window if kind == "sliding_attention" else None for kind in layer_types]
    if getattr(config, "use_sliding_window", True) is False:
        window = None
    return [window] * config.num_hidden_layers


def pool_sizes(windows: list[int | None], num_blocks: int, block_size: int, max_num_seqs: int,
               max_num_batched_tokens: int, most_blocks: int) -> list[int]:
    """Blocks in each group's pool (make_groups' order) out of the bytes of `num_blocks` blocks of
    every layer.

    A sliding group: what max_num_seqs requests hold at once, each the blocks its window covers
    (window / block_size rounded up, +2 where the window and the newest token straddle block
    boundaries), plus the blocks of a step's max_num_batched_tokens new tokens; never more than
    num_blocks. The full group: the rest of the bytes, but at most `most_blocks` (every request's
    whole context) unless num_blocks is already more. Without a full group every pool keeps num_blocks.
    """
    distinct = _distinct_windows(windows)
    if distinct[0] is not None:
        return [num_blocks] * len(distinct)
    sliding = [min(num_blocks, max_num_seqs * (blocks_needed(window, block_size) + 2)
                   + blocks_needed(max_num_batched_tokens, block_size)) for window in distinct[1:]]
    layers = [windows.count(window) for window in distinct]  # per group
    spare_layer_blocks = num_blocks * len(windows) - sum(s * n for s, n in zip(sliding, layers[1:]))
    full = min(spare_layer_blocks // layers[0], max(num_blocks, most_blocks))
    return [full] + sliding


def make_groups(windows: list[int | None], num_blocks: int, block_size: int,
                enable_prefix_caching: bool, sizes: list[int] | None = None) -> list[LayerGroup]:
    """One group per distinct window, full attention first; each with its own pool, of sizes[g]
    blocks (pool_sizes), or num_blocks each."""
    distinct = _distinct_windows(windows)
    sizes = sizes or [num_blocks] * len(distinct)
    return [LayerGroup("full" if window is None else "sliding", window,
                       [layer for layer, w in enumerate(windows) if w == window],
                       BlockPool(size, block_size, enable_prefix_caching))
            for window, size in zip(distinct, sizes)]


def _distinct_windows(windows: list[int | None]) -> list[int | None]:
    """Each window once: full attention (None) first, then the sliding windows from short to long."""
    return sorted(set(windows), key=lambda w: -1 if w is None else w)
