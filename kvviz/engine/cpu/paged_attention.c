/* Paged attention on the CPU: each query reads its request's keys and values where they lie, in
 * the cache's blocks, through its block table. Nothing is gathered into a padded copy first.
 *
 * The engine writes a step's new keys and values into the cache before it calls this, so every
 * key a query may see is already in a block. One work item is one query token and a run of its
 * query heads, all of them when they fit (MAX_HEADS): each row of keys and values is then read
 * from memory once, whole and in order, for every head, including the G = H / KVH query heads
 * that share one KV head (GQA; MQA is KVH = 1). Every cache line of the rows a few keys ahead is
 * asked for before it is needed (PREFETCH): with only each row's first line asked for, decode
 * attention on SmolLM2 (rows of 768 bytes, 12 lines) read the cache at half the memory's speed.
 * The weighted sum of values runs one query head at a time, its accumulator held in registers.
 * Softmax runs online over spans of up to SPAN keys (running maximum, running sum, rescaled
 * accumulator), as FlashAttention and vLLM's kernels do, so no whole row of scores is ever held.
 *
 * An 8-bit cache (EngineConfig.kv_cache_dtype "int8" or "fp8") is read in place too: each row of
 * codes is turned back into float32 (code x its scale) as attention reads it, into a row-sized
 * scratch on the stack, never into a gathered copy. A float32 cache does none of that work: the
 * cache's kind is a constant in attend_item, and each kind gets a compiled copy of its own.
 *
 * Shapes (row-major):
 *   query       (N, H, D) float32, strides (query_token_stride, query_head_stride); D contiguous
 *   key_cache   (num_blocks, block_size, KVH, D)   contiguous; float32, int8 or fp8 e4m3 codes
 *   value_cache (num_blocks, block_size, KVH, D)   contiguous; as key_cache
 *   key_scales, value_scales (num_blocks, block_size, KVH) float32, one per row of codes; NULL for float32
 *   out         (N, H, D) float32                  contiguous
 *   block_tables  (num_seqs, max_blocks) int32: request s's logical block i is block_tables[s][i]
 *   token_seq     (N,) int32: which row of block_tables query token n belongs to
 *   token_pos     (N,) int32: the position of query token n in its request; it sees keys 0..pos
 * window > 0 keeps only the last `window` keys (sliding window); softcap > 0 caps scores with
 * tanh (Gemma-2).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "exp_nonpositive.h"

/* a * b + c in one rounding (FMA) where the CPU has it: the weighted sums run on it. The other kernels
 * (layer_ops.c) keep separate roundings, to match PyTorch's ops bit for bit. */
#pragma GCC optimize("fp-contract=fast")

#define SPAN 128      /* keys scored before one softmax update */
#define MAX_HEADS 64  /* query heads one work item holds on the stack */
#define PREFETCH 4    /* rows ahead to ask the memory for */
#define CACHE_LINE 64 /* bytes the memory sends at a time */

/* Eight floats in one vector register (AVX) or two (SSE); GCC and clang lower it for the target.
 * aligned(4): loads from any float address. */
typedef float vec8 __attribute__((vector_size(32), aligned(4)));

static inline float sum8(vec8 v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* How the cache stores its values: the same numbers as kernels.py's CACHE_KINDS. */
enum cache_kind { CACHE_FLOAT32 = 0, CACHE_INT8 = 1, CACHE_FP8 = 2 };

/* fp8 e4m3 (torch.float8_e4m3fn): 1 sign bit, 4 exponent bits e (bias 7), 3 mantissa bits m.
 * A normal number is 1.mmm x 2^(e - 7) = (8 + m) x 2^(e - 10); e = 0 holds the subnormals,
 * 0.mmm x 2^-6 = m x 2^(1 - 10). No infinity; all seven low bits set is NaN. Plain integer and
 * float arithmetic, without branches or a table, so the loop decoding a row vectorises. */
static inline float fp8_e4m3_value(uint8_t code) {
    const int exponent = (code >> 3) & 15, mantissa = code & 7;
    const int whole = exponent > 0 ? 8 + mantissa : mantissa;  /* 1.mmm or 0.mmm, times 8 */
    /* 2^(e - 10), subnormals 2^(1 - 10), written straight into a float32's exponent field (bias 127) */
    const int32_t power_bits = ((exponent > 0 ? exponent : 1) - 10 + 127) << 23;
    const union { int32_t bits; float value; } power = {.bits = power_bits};
    const float magnitude = whole * power.value;
    const float value = code & 0x80 ? -magnitude : magnitude;
    return (code & 0x7F) == 0x7F ? NAN : value;
}

/* Every code's value, for the tests to hold against torch's own conversion. out: 256 floats. */
void kvviz_fp8_e4m3_values(float *out) {
    for (int code = 0; code < 256; code++) out[code] = fp8_e4m3_value((uint8_t)code);
}

/* The keys (or values) of `kv_heads` KV heads, head_dim each, at `row` in slot `slot`, as float32:
 * a float32 cache's where they lie; an 8-bit cache's decoded into `scratch`, each code times the
 * scale of its token and KV head. */
static inline __attribute__((always_inline)) const float *read_row(
        const enum cache_kind kind, const int head_dim, const char *row, const float *scales, long slot,
        int num_kv_heads, int kv_heads, float *scratch) {
    if (kind == CACHE_FLOAT32) return (const float *)row;
    const uint8_t *codes = (const uint8_t *)row;
    const float *scale = scales + slot * num_kv_heads;  /* one per KV head of this token */
    for (int j = 0; j < kv_heads; j++)
        for (int i = 0; i < head_dim; i++) {
            const uint8_t code = codes[j * head_dim + i];
            const float value = kind == CACHE_INT8 ? (float)(int8_t)code : fp8_e4m3_value(code);
            scratch[j * head_dim + i] = value * scale[j];
        }
    return scratch;
}

/* One query token, query heads [0, heads) of `query`. Head h uses KV head (h + skew) / group,
 * counted from `key_cache`'s first (skew: where in its group the first head sits); `key_scales`
 * and `value_scales` start at that KV head too. kind and head_dim (a multiple of 8) are constants
 * in each caller, so the compiler drops the other kinds' code and unrolls every loop over head_dim. */
static inline __attribute__((always_inline)) void attend_item(
        const enum cache_kind kind, const int head_dim, const float *query, long query_head_stride,
        const void *key_cache, const void *value_cache, const float *key_scales, const float *value_scales,
        float *out, const int32_t *table, int first, int last, int heads, int group, int skew,
        int num_kv_heads, int block_size, float scale, float softcap) {
    const int width = head_dim / 8;  /* vectors per head */
    const long row_bytes = (long)num_kv_heads * head_dim * (kind == CACHE_FLOAT32 ? sizeof(float) : 1);
    const long value_offset = (const char *)value_cache - (const char *)key_cache;  /* in bytes */
    const int kv_heads = (skew + heads - 1) / group + 1;  /* KV heads this item's query heads read */
    vec8 q[MAX_HEADS][width], acc[MAX_HEADS][width];
    float running_max[MAX_HEADS], running_sum[MAX_HEADS], score[MAX_HEADS][SPAN];
    const char *rows[SPAN];  /* where each key of the span lies; its value lies value_offset further on */
    long slots[SPAN];  /* the slot of each: where an 8-bit cache's scales for it lie */
    float scratch[kind == CACHE_FLOAT32 ? 1 : kv_heads * head_dim];  /* one decoded row of an 8-bit cache */
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
            slots[t] = (long)table[pos / block_size] * block_size + pos % block_size;
            rows[t] = (const char *)key_cache + slots[t] * row_bytes;
        }
        for (int t = 0; t < count; t++) {  /* scores: each key row is read once for all heads */
            if (t + PREFETCH < count)  /* the key row ahead, and its value row, which the weighted sum reads */
                for (long line = 0; line < row_bytes; line += CACHE_LINE) {  /* a prefetch asks for one line */
                    __builtin_prefetch(rows[t + PREFETCH] + line);
                    __builtin_prefetch(rows[t + PREFETCH] + value_offset + line);
                }
            const float *keys = read_row(kind, head_dim, rows[t], key_scales, slots[t], num_kv_heads, kv_heads,
                                         scratch);
            for (int h = 0; h < heads; h++) {
                const vec8 *key = (const vec8 *)(keys + (h + skew) / group * head_dim);
                vec8 sum = q[h][0] * key[0];
                for (int i = 1; i < width; i++) sum += q[h][i] * key[i];
                score[h][t] = sum8(sum);
            }
        }
        for (int h = 0; h < heads; h++) {  /* online softmax: fold this span into the running sums */
            if (softcap > 0.0f)
                for (int t = 0; t < count; t++) score[h][t] = tanhf(score[h][t] / softcap) * softcap;
            float span_max = running_max[h];
#pragma omp simd reduction(max : span_max)
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
        if (kind == CACHE_FLOAT32) {  /* weighted values, one head at a time, its accumulator in registers */
            for (int h = 0; h < heads; h++) {
                const long head_offset = value_offset + (long)((h + skew) / group) * head_dim * sizeof(float);
                vec8 sum[width];
                for (int i = 0; i < width; i++) sum[i] = acc[h][i];
                for (int t = 0; t < count; t++) {  /* the span's value rows: in cache since the scores */
                    const vec8 *value = (const vec8 *)(rows[t] + head_offset);
                    for (int i = 0; i < width; i++) sum[i] += score[h][t] * value[i];
                }
                for (int i = 0; i < width; i++) acc[h][i] = sum[i];
            }
        } else {  /* an 8-bit cache: each value row decoded once, for every head */
            for (int t = 0; t < count; t++) {
                const float *values = read_row(kind, head_dim, rows[t] + value_offset, value_scales, slots[t],
                                               num_kv_heads, kv_heads, scratch);
                for (int h = 0; h < heads; h++) {
                    const vec8 *value = (const vec8 *)(values + (h + skew) / group * head_dim);
                    for (int i = 0; i < width; i++) acc[h][i] += score[h][t] * value[i];
                }
            }
        }
    }
    for (int h = 0; h < heads; h++) {
        const float inverse = 1.0f / running_sum[h];
        for (int i = 0; i < width; i++) *(vec8 *)(out + h * head_dim + 8 * i) = acc[h][i] * inverse;
    }
}

/* attend_item on a cache of one kind, with a specialised copy for each usual head size. Each kind
 * is a function of its own, compiled as if it were alone, so the float32 one runs as fast as before
 * the 8-bit kinds came (with all kinds inlined into one loop it ran 4-7% slower). */
#define ITEM_PARAMETERS                                                                                 \
    const int head_dim, const float *query, long query_head_stride, const void *key_cache,            \
    const void *value_cache, const float *key_scales, const float *value_scales, float *out,          \
    const int32_t *table, int first, int last, int heads, int group, int skew, int num_kv_heads,      \
    int block_size, float scale, float softcap
#define ATTEND(KIND, D) attend_item(KIND, D, query, query_head_stride, key_cache, value_cache, key_scales, \
                                    value_scales, out, table, first, last, heads, group, skew, num_kv_heads, \
                                    block_size, scale, softcap)
#define ATTEND_HEAD_SIZES(KIND)                                                                         \
    switch (head_dim) {  /* the usual head sizes get a specialised copy */                             \
        case 64: ATTEND(KIND, 64); break;                                                               \
        case 128: ATTEND(KIND, 128); break;                                                             \
        case 32: ATTEND(KIND, 32); break;                                                               \
        case 256: ATTEND(KIND, 256); break;                                                             \
        default: ATTEND(KIND, head_dim);  /* any other multiple of 8 */                                 \
    }
static void attend_float32(ITEM_PARAMETERS) { ATTEND_HEAD_SIZES(CACHE_FLOAT32); }
static void attend_int8(ITEM_PARAMETERS) { ATTEND_HEAD_SIZES(CACHE_INT8); }
static void attend_fp8(ITEM_PARAMETERS) { ATTEND_HEAD_SIZES(CACHE_FP8); }

/* cache_kind: CACHE_FLOAT32 (key_scales and value_scales NULL), CACHE_INT8 or CACHE_FP8. */
void kvviz_paged_attention(const float *query, long query_token_stride, long query_head_stride,
                           const void *key_cache, const void *value_cache, const float *key_scales,
                           const float *value_scales, int cache_kind, float *out,
                           const int32_t *block_tables, int max_blocks,
                           const int32_t *token_seq, const int32_t *token_pos,
                           int num_tokens, int num_heads, int num_kv_heads, int head_dim,
                           int block_size, int window, float scale, float softcap, int num_threads) {
    const int group = num_heads / num_kv_heads;  /* query heads per KV head */
    const long value_bytes = cache_kind == CACHE_FLOAT32 ? sizeof(float) : 1;  /* per cached value */
    void (*const attend)(ITEM_PARAMETERS) =
        cache_kind == CACHE_INT8 ? attend_int8 : cache_kind == CACHE_FP8 ? attend_fp8 : attend_float32;
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
        const void *k = (const char *)key_cache + kv_first * head_dim * value_bytes;
        const void *v = (const char *)value_cache + kv_first * head_dim * value_bytes;
        const float *k_scales = key_scales ? key_scales + kv_first : NULL;
        const float *v_scales = value_scales ? value_scales + kv_first : NULL;
        float *o = out + ((long)n * num_heads + head) * head_dim;
        attend(head_dim, q, query_head_stride, k, v, k_scales, v_scales, o, table, first, last, heads, group,
               skew, num_kv_heads, block_size, scale, softcap);
    }
}
