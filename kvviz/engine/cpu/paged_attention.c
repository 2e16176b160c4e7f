/* Paged attention on the CPU: each query reads its request's keys and values where they lie, in
 * the cache's blocks, through its block table. Nothing is gathered into a padded copy first.
 *
 * The engine writes a step's new keys and values into the cache before it calls this, so every
 * key a query may see is already in a block. One work item is one query token and a run of its
 * query heads, all of them when they fit (MAX_HEADS): each row of keys and values is then read
 * from memory once, whole and in order, for every head, including the G = H / KVH query heads
 * that share one KV head (GQA; MQA is KVH = 1). Softmax runs online over
 * spans of up to SPAN keys (running maximum, running sum, rescaled accumulator), as
 * FlashAttention and vLLM's kernels do, so no whole row of scores is ever held.
 *
 * Shapes (float32, row-major):
 *   query       (N, H, D) with strides (query_token_stride, query_head_stride); D contiguous
 *   key_cache   (num_blocks, block_size, KVH, D)   contiguous
 *   value_cache (num_blocks, block_size, KVH, D)   contiguous
 *   out         (N, H, D)                          contiguous
 *   block_tables  (num_seqs, max_blocks) int32: request s's logical block i is block_tables[s][i]
 *   token_seq     (N,) int32: which row of block_tables query token n belongs to
 *   token_pos     (N,) int32: the position of query token n in its request; it sees keys 0..pos
 * window > 0 keeps only the last `window` keys (sliding window); softcap > 0 caps scores with
 * tanh (Gemma-2).
 */
#include <math.h>
#include <stdint.h>

#include "exp_nonpositive.h"

#define SPAN 128      /* keys scored before one softmax update */
#define MAX_HEADS 64  /* query heads one work item holds on the stack */
#define PREFETCH 4    /* rows ahead to ask the memory for */

/* Eight floats in one vector register (AVX) or two (SSE); GCC and clang lower it for the target.
 * aligned(4): loads from any float address. */
typedef float vec8 __attribute__((vector_size(32), aligned(4)));

static inline float sum8(vec8 v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* One query token, query heads [0, heads) of `query`. Head h uses KV head (h + skew) / group,
 * counted from `key_cache`'s first (skew: where in its group the first head sits). head_dim (a multiple of 8) is a constant in each caller, so
 * the compiler unrolls every loop over it. */
static inline __attribute__((always_inline)) void attend_item(
        const int head_dim, const float *query, long query_head_stride, const float *key_cache,
        const float *value_cache, float *out, const int32_t *table, int first, int last, int heads,
        int group, int skew, long token_stride, int block_size, float scale, float softcap) {
    const int width = head_dim / 8;  /* vectors per head */
    vec8 q[MAX_HEADS][width], acc[MAX_HEADS][width];
    float running_max[MAX_HEADS], running_sum[MAX_HEADS], score[MAX_HEADS][SPAN];
    const float *rows[SPAN];  /* where each key of the span lies; its value lies at the same offset */
    const long value_offset = value_cache - key_cache;
    for (int h = 0; h < heads; h++) {
        for (int i = 0; i < width; i++) {
            q[h][i] = *(const vec8 *)(query + h * query_head_stride + 8 * i) * scale;
            acc[h][i] = (vec8){0};
        }
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
    }
    for (int start = first; start <= last; start += SPAN) {
        const int count = last - start + 1 < SPAN ? last - start + 1 : SPAN;
        for (int t = 0; t < count; t++) {  /* block table, then offset in the block */
            const int pos = start + t;
            rows[t] = key_cache + ((long)table[pos / block_size] * block_size + pos % block_size) * token_stride;
        }
        for (int t = 0; t < count; t++) {  /* scores: each key row is read once for all heads */
            if (t + PREFETCH < count) __builtin_prefetch(rows[t + PREFETCH]);
            for (int h = 0; h < heads; h++) {
                const vec8 *key = (const vec8 *)(rows[t] + (h + skew) / group * head_dim);
                vec8 sum = q[h][0] * key[0];
                for (int i = 1; i < width; i++) sum += q[h][i] * key[i];
                score[h][t] = sum8(sum);
            }
        }
        for (int h = 0; h < heads; h++) {  /* online softmax: fold this span into the running sums */
            if (softcap > 0.0f)
                for (int t = 0; t < count; t++) score[h][t] = tanhf(score[h][t] / softcap) * softcap;
            float span_max = running_max[h];
            for (int t = 0; t < count; t++) span_max = score[h][t] > span_max ? score[h][t] : span_max;
            const float rescale = exp_nonpositive(running_max[h] - span_max);  /* 0 on the first span */
            float span_sum = 0.0f;
            for (int t = 0; t < count; t++) {
                score[h][t] = exp_nonpositive(score[h][t] - span_max);
                span_sum += score[h][t];
            }
            running_sum[h] = running_sum[h] * rescale + span_sum;
            running_max[h] = span_max;
            for (int i = 0; i < width; i++) acc[h][i] *= rescale;
        }
        for (int t = 0; t < count; t++) {  /* weighted values: each value row is read once */
            if (t + PREFETCH < count) __builtin_prefetch(rows[t + PREFETCH] + value_offset);
            for (int h = 0; h < heads; h++) {
                const vec8 *value = (const vec8 *)(rows[t] + value_offset + (h + skew) / group * head_dim);
                for (int i = 0; i < width; i++) acc[h][i] += score[h][t] * value[i];
            }
        }
    }
    for (int h = 0; h < heads; h++) {
        const float inverse = 1.0f / running_sum[h];
        for (int i = 0; i < width; i++) *(vec8 *)(out + h * head_dim + 8 * i) = acc[h][i] * inverse;
    }
}

void kvviz_paged_attention(const float *query, long query_token_stride, long query_head_stride,
                           const float *key_cache, const float *value_cache, float *out,
                           const int32_t *block_tables, int max_blocks,
                           const int32_t *token_seq, const int32_t *token_pos,
                           int num_tokens, int num_heads, int num_kv_heads, int head_dim,
                           int block_size, int window, float scale, float softcap, int num_threads) {
    const int group = num_heads / num_kv_heads;  /* query heads per KV head */
    const long token_stride = (long)num_kv_heads * head_dim;  /* between two tokens in a block */
    /* A work item is one token and a run of query heads: all of them when they fit, so a key
     * row is read whole and in order; fewer when there are too few tokens to keep threads busy. */
    int heads_per_item = num_heads < MAX_HEADS ? num_heads : MAX_HEADS;
    while (heads_per_item > group && (long)num_tokens * ((num_heads + heads_per_item - 1) / heads_per_item) < 4L * num_threads)
        heads_per_item = (heads_per_item + 1) / 2;
    const int runs = (num_heads + heads_per_item - 1) / heads_per_item;

#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads)
    for (long item = 0; item < (long)num_tokens * runs; item++) {
        const int n = (int)(item / runs), head = (int)(item % runs) * heads_per_item;
        const int heads = num_heads - head < heads_per_item ? num_heads - head : heads_per_item;
        const int32_t *table = block_tables + (long)token_seq[n] * max_blocks;
        const int last = token_pos[n];
        const int first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
        const int kv_first = head / group, skew = head - kv_first * group;
        const float *q = query + n * query_token_stride + head * query_head_stride;
        const float *k = key_cache + (long)kv_first * head_dim, *v = value_cache + (long)kv_first * head_dim;
        float *o = out + ((long)n * num_heads + head) * head_dim;
#define ATTEND(D) attend_item(D, q, query_head_stride, k, v, o, table, first, last, heads, group, skew, \
                              token_stride, block_size, scale, softcap)
        switch (head_dim) {  /* the usual head sizes get a specialised copy */
            case 64: ATTEND(64); break;
            case 128: ATTEND(128); break;
            case 32: ATTEND(32); break;
            case 256: ATTEND(256); break;
            default: ATTEND(head_dim);  /* any other multiple of 8 */
        }
    }
}
