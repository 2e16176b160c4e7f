"""The work kvviz rests on: what each source contributes and which lesson shows it."""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.lessons.lecture import by_key

# the lessons' titles, as their declarations spell them
PREFILL, BILL, LAB, PAGED, STRATEGIES, BATCH, TOGETHER, SPECULATIVE = (by_key(key).title for key in (
    "prefill_decode", "memory_bill", "model_lab", "paged_batching", "cache_strategies", "batch_generation",
    "putting_it_together", "speculative"))


@dataclass(frozen=True)
class Source:
    title: str
    authors: str
    url: str
    idea: str  # in kvviz's own words
    lessons: tuple[str, ...]


SOURCES = [
    Source("Attention Is All You Need", "Vaswani et al., 2017", "https://arxiv.org/abs/1706.03762",
           "Scaled dot-product attention with queries, keys and values, and the causal mask of a decoder.",
           (PREFILL,)),
    Source("RoFormer: rotary position embedding", "Su et al., 2021", "https://arxiv.org/abs/2104.09864",
           "Positions enter by rotating queries and keys; the cache stores keys already rotated.", (PREFILL,)),
    Source("Efficient Memory Management for LLM Serving with PagedAttention (vLLM)", "Kwon et al., 2023",
           "https://arxiv.org/abs/2309.06180",
           "The cache in fixed-size blocks found through a block table, like virtual-memory pages; "
           "prefix sharing by reference counts. It measured only 20.4-38.2% of the KV cache memory holding "
           "actual tokens in the serving systems before it. kvviz's engine follows vLLM's v1 block pool and "
           "scheduler.", (PREFILL, PAGED, BATCH, TOGETHER)),
    Source("vLLM", "vLLM project", "https://github.com/vllm-project/vllm",
           "The serving engine kvviz's names come from (block pool, slot mapping, prefix hash) and its "
           "yardstick for speed.", (PAGED, BATCH)),
    Source("nano-vllm", "GeeeekExplorer", "https://github.com/GeeeekExplorer/nano-vllm",
           "A 1,200-line engine that reads like a textbook; kvviz's cut into scheduler, block manager and "
           "runner follows it.", (PAGED, BATCH)),
    Source("Orca: continuous batching", "Yu et al., OSDI 2022",
           "https://www.usenix.org/conference/osdi22/presentation/yu",
           "Scheduling per step instead of per batch, so finished requests leave and new ones join at once.",
           (BATCH, PAGED)),
    Source("Fast Transformer Decoding: One Write-Head is All You Need (MQA)", "Shazeer, 2019",
           "https://arxiv.org/abs/1911.02150",
           "Multi-query attention: every query head shares one key and value head, so the cache shrinks "
           "by the head count.", (BILL, PREFILL, TOGETHER)),
    Source("GQA: Training Generalized Multi-Query Transformer Models", "Ainslie et al., 2023",
           "https://arxiv.org/abs/2305.13245",
           "Grouped-query attention: groups of query heads share a KV head; the bundled model uses 8 query "
           "heads over 2 KV heads.", (PREFILL, BILL, LAB, TOGETHER)),
    Source("DeepSeek-V2 (multi-head latent attention, MLA)", "DeepSeek-AI, 2024",
           "https://arxiv.org/abs/2405.04434",
           "The cache keeps one compressed latent vector plus a small rotary key per token and layer. "
           "Conceptually each head's keys and values are projections of that latent; in practice kernels "
           "fold those projections into the query and output matrices, so they are never built.", (BILL,)),
    Source("Efficient Streaming Language Models with Attention Sinks (StreamingLLM)", "Xiao et al., 2023",
           "https://arxiv.org/abs/2309.17453",
           "Keep a window of recent tokens plus the first few (the sinks). The Eviction lab runs it (sinks + "
           "window) beside a plain window, which drops the sinks. Unlike the paper, which numbers positions "
           "within the cache, kvviz's kept keys keep the rotary positions they were computed at.",
           (STRATEGIES, BILL)),
    Source("H2O: Heavy-Hitter Oracle for Efficient Generative Inference", "Zhang et al., 2023",
           "https://arxiv.org/abs/2306.14048",
           "Evict the tokens that have received the least attention. The Eviction lab runs it: each KV head "
           "keeps its newest tokens and the keys with the most attention summed so far, beside the sliding "
           "window, which evicts by age.", (STRATEGIES,)),
    Source("KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", "Liu et al., 2024",
           "https://arxiv.org/abs/2402.02750",
           "Quantize keys per channel and values per token, with a scale and zero point per group, keeping "
           "the newest tokens in full precision. kvviz's quantized cache keeps that full-precision window "
           "but groups keys and values alike, along head_dim within each token, as transformers' "
           "QuantizedCache does; the bill counts the same codes, scales and zero points.",
           (STRATEGIES, BILL, PREFILL, TOGETHER)),
    Source("Hugging Face transformers: caching", "Hugging Face",
           "https://huggingface.co/docs/transformers/kv_cache",
           "DynamicCache, StaticCache, sliding-window layers and QuantizedCache; kvviz's cache strategies "
           "run these classes, and its engine plugs into transformers' attention interface. The dynamic "
           "and static caches and the trade-off between them for compiled code come from here.",
           (STRATEGIES, PREFILL, LAB, TOGETHER)),
    Source("Roofline: an insightful visual performance model", "Williams, Waterman and Patterson, 2009",
           "https://doi.org/10.1145/1498765.1498785",
           "A kernel is bounded by compute or by memory bandwidth, depending on its FLOPs per byte read; "
           "decode reads every weight and cached byte for a few FLOPs each.", (PREFILL,)),
    Source("Megatron-LM: tensor model parallelism", "Shoeybi et al., 2019", "https://arxiv.org/abs/1909.08053",
           "Splitting each layer's heads and matrices over GPUs; each GPU then caches only its own KV heads.",
           (BILL,)),
    Source("Fast Inference from Transformers via Speculative Decoding", "Leviathan, Kalman and Matias, 2023",
           "https://arxiv.org/abs/2211.17192",
           "A small model drafts a few tokens and the large one checks them all in one pass; a rule for "
           "accepting drafts keeps the large model's output distribution exactly.", (SPECULATIVE,)),
    Source("Accelerating Large Language Model Decoding with Speculative Sampling", "Chen et al., 2023",
           "https://arxiv.org/abs/2302.01318",
           "The same idea, found independently: draft with a cheaper model, verify in parallel, accept or "
           "resample so that sampling stays exact.", (SPECULATIVE,)),
    Source("Prompt lookup decoding", "Saxena, 2023", "https://github.com/apoorvumang/prompt-lookup-decoding",
           "Drafts with no draft model: the tokens that followed the last earlier occurrence of the text's "
           "newest n-gram. kvviz drafts this way and verifies greedily, keeping a draft only when it equals "
           "the model's own choice.", (SPECULATIVE,)),
]
