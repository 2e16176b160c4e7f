"""Layer groups: the layers that attend alike share one block table (vLLM v1's KV cache groups).

Most models attend to the whole context in every layer: one group, and the engine works as it
always has. Some layers attend to the last `window` positions only: Gemma-2 alternates sliding
and full layers 1:1, Gemma-3 has 5 sliding layers to 1 full, Mistral-style models slide in every
layer. Those layers form a sliding group. Once a query has moved `window` tokens past a block, no
query to come will read that block again, so the sliding group gives it back to its pool while
the full group keeps the whole context. A request's sliding blocks then stay flat past the window
(about window / block_size + 1 of them) while its full blocks grow with the context.

How it is built, the simplest correct way:
- One BlockPool per group, of the same size, all over the one cache tensor: block b of group g is
  the slice storage[:, layers of g, b]. Groups hold different layers, so one id used by two
  groups names two different slices; a copy-on-write copies only its group's layers. The tensor
  is as large as before: a block the sliding group gives back serves other requests' sliding
  layers only. (vLLM shares one pool between groups, a block being one group's share of the
  layers, so that freed sliding blocks make room for more requests; kvviz does not, yet.)
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

from kvviz.engine.block_pool import BlockPool


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


def make_groups(windows: list[int | None], num_blocks: int, block_size: int,
                enable_prefix_caching: bool) -> list[LayerGroup]:
    """One group per distinct window, full attention first; each with its own pool."""
    distinct = sorted(set(windows), key=lambda w: -1 if w is None else w)
    return [LayerGroup("full" if window is None else "sliding", window,
                       [layer for layer, w in enumerate(windows) if w == window],
                       BlockPool(num_blocks, block_size, enable_prefix_caching))
            for window in distinct]
