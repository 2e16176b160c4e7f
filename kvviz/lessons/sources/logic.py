"""The work kvviz rests on: what each source contributes and which lesson shows it."""

from __future__ import annotations

from dataclasses import dataclass

PREFILL, BILL, LAB, PAGED, STRATEGIES, BATCH = ("Prefill and decode", "Memory bill", "Model lab",
                                                 "Paged cache and batching", "Cache strategies",
                                                 "Batch generation")


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
           "prefix sharing by reference counts. kvviz's engine follows vLLM's v1 block pool and scheduler.",
           (PREFILL, PAGED, BATCH)),
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
           "by the head count.", (BILL, PREFILL)),
    Source("GQA: Training Generalized Multi-Query Transformer Models", "Ainslie et al., 2023",
           "https://arxiv.org/abs/2305.13245",
           "Grouped-query attention: groups of query heads share a KV head; the bundled model uses 8 query "
           "heads over 2 KV heads.", (PREFILL, BILL, LAB)),
    Source("DeepSeek-V2 (multi-head latent attention, MLA)", "DeepSeek-AI, 2024",
           "https://arxiv.org/abs/2405.04434",
           "The cache keeps one compressed latent vector plus a small rotary key per token and layer; "
           "keys and values are rebuilt from it.", (BILL,)),
    Source("Efficient Streaming Language Models with Attention Sinks (StreamingLLM)", "Xiao et al., 2023",
           "https://arxiv.org/abs/2309.17453",
           "Keep a window of recent tokens plus the first few (the sinks). kvviz's sliding-window cache is "
           "the window without the sinks.", (STRATEGIES, BILL)),
    Source("H2O: Heavy-Hitter Oracle for Efficient Generative Inference", "Zhang et al., 2023",
           "https://arxiv.org/abs/2306.14048",
           "Evict the tokens that have received the least attention. kvviz does not implement it; its "
           "sliding window evicts by age instead, which is the contrast worth naming in class.",
           (STRATEGIES,)),
    Source("KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", "Liu et al., 2024",
           "https://arxiv.org/abs/2402.02750",
           "Quantize the cache in groups with a scale and zero point, keeping the newest tokens in full "
           "precision; kvviz's quantized cache and the bill's quantized formula do the same.",
           (STRATEGIES, BILL, PREFILL)),
    Source("Hugging Face transformers: caching", "Hugging Face",
           "https://huggingface.co/docs/transformers/kv_cache",
           "DynamicCache, StaticCache, sliding-window layers and QuantizedCache; kvviz's cache strategies "
           "run these classes, and its engine plugs into transformers' attention interface.",
           (STRATEGIES, PREFILL, LAB)),
    Source("Roofline: an insightful visual performance model", "Williams, Waterman and Patterson, 2009",
           "https://doi.org/10.1145/1498765.1498785",
           "A kernel is bounded by compute or by memory bandwidth, depending on its FLOPs per byte read; "
           "decode reads every weight and cached byte for a few FLOPs each.", (PREFILL,)),
    Source("Megatron-LM: tensor model parallelism", "Shoeybi et al., 2019", "https://arxiv.org/abs/1909.08053",
           "Splitting each layer's heads and matrices over GPUs; each GPU then caches only its own KV heads.",
           (BILL,)),
]
