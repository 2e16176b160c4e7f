/* The work between the linear layers of the engine's CPU float32 steps (packed_layers.py, and the
 * sampler's greedy pick), each in one pass over memory.
 *
 *   kvviz_silu_and_mul   out = silu(gate) * up, from the one packed product x [W_gate; W_up]^T
 *   kvviz_rms_norm       out = weight * (x / sqrt(mean(x^2) + eps)), row by row
 *   kvviz_rotary         the query and key heads of one packed q/k/v product rotated in place
 *   kvviz_argmax_rows    each row's index of its largest logit
 *
 * PyTorch would run three ops for the first (slice, SiLU, multiply), six for the second (square,
 * mean, add, rsqrt, multiply, multiply) and seven for the third (two slices, negate, concatenate,
 * two multiplies, add), each a pass that allocates; its argmax over 48 rows of 49,152 logits took
 * ten times its max. Float32, row-major; the rows are split over `num_threads` OpenMP threads when
 * there are enough to pay for waking them.
 */
#include <math.h>

#include "exp_nonpositive.h"

#define PARALLEL_FROM 65536  /* elements below which one thread is quicker */

/* SiLU, x * sigmoid(x), with sigmoid from e = exp(-|x|) so that it never overflows:
 * 1 / (1 + e) for x >= 0 and e / (1 + e) below. */
static inline float silu(float x) {
    const float e = exp_nonpositive(-fabsf(x));
    return x * (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* gate_up (rows, 2I): each row the gate's I values then the up projection's (x [W_gate; W_up]^T).
 * out (rows, I) = silu(gate) * up. */
void kvviz_silu_and_mul(const float *gate_up, float *out, long rows, long inter, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * inter >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *gate = gate_up + r * 2 * inter, *up = gate + inter;
        float *dst = out + r * inter;
        for (long i = 0; i < inter; i++) dst[i] = silu(gate[i]) * up[i];
    }
}

/* x (rows, n) -> out (rows, n): each row scaled by 1 / sqrt(mean of its squares + eps), then times
 * weight (n). The squares are summed in 16 float lanes at once (omp simd), as PyTorch's vectorised
 * mean does, in another order: the results differ in the last bit or two. */
void kvviz_rms_norm(const float *x, const float *weight, float *out, long rows, long n, float eps,
                    int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * n >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *src = x + r * n;
        float *dst = out + r * n;
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (long i = 0; i < n; i++) squares += src[i] * src[i];
        const float scale = 1.0f / sqrtf(squares / (float)n + eps);
#pragma omp simd
        for (long i = 0; i < n; i++) dst[i] = weight[i] * (src[i] * scale);
    }
}

/* Rotary position embedding in place, as transformers' apply_rotary_pos_emb computes it:
 * x * cos + rotate_half(x) * sin, where rotate_half(x) = (-x[D/2:], x[:D/2]).
 * x: rows of `heads` heads of head_dim floats each, the heads of a row contiguous, rows row_stride
 * floats apart (the query and key heads of one packed q/k/v product); cos, sin (rows, head_dim).
 * Each product and the sum are rounded as PyTorch rounds them (no fused multiply-add: -std=c11),
 * so the result is the same to the last bit. */
void kvviz_rotary(float *x, long rows, long row_stride, long heads, long head_dim, const float *cos,
                  const float *sin, int num_threads) {
    const long half = head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * heads * head_dim >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *c = cos + r * head_dim, *s = sin + r * head_dim;
        for (long h = 0; h < heads; h++) {
            float *v = x + r * row_stride + h * head_dim;
            float rotated[half];
#pragma omp simd
            for (long i = 0; i < half; i++) rotated[i] = v[i] * c[i] + (-v[i + half]) * s[i];
#pragma omp simd
            for (long i = half; i < head_dim; i++) v[i] = v[i] * c[i] + v[i - half] * s[i];
            for (long i = 0; i < half; i++) v[i] = rotated[i];
        }
    }
}

/* Each row's index of its largest value, the first where several tie; a row holding NaN gets its
 * first NaN's index, as torch.argmax gives. The max is found in float lanes (omp simd), then the row
 * is scanned for it 64 values at a time; a row holding NaN or an infinity (row[i] - row[i] is then
 * NaN) is scanned value by value instead. x (rows, n) -> out (rows,) int64. */
void kvviz_argmax_rows(const float *x, long rows, long n, long *out, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows * n >= PARALLEL_FROM)
    for (long r = 0; r < rows; r++) {
        const float *row = x + r * n;
        float best = -INFINITY, poison = 0.0f;
#pragma omp simd reduction(max : best) reduction(+ : poison)
        for (long i = 0; i < n; i++) {
            best = row[i] > best ? row[i] : best;
            poison += row[i] - row[i];
        }
        long found = 0;
        if (poison != poison) {  /* NaN or an infinity somewhere */
            float top = row[0];
            for (long i = 1; i < n && top == top; i++) {
                if (row[i] != row[i] || row[i] > top) { top = row[i]; found = i; }
            }
        } else {
            for (long start = 0; start < n; start += 64) {
                const long end = start + 64 < n ? start + 64 : n;
                int hit = 0;
#pragma omp simd reduction(| : hit)
                for (long i = start; i < end; i++) hit |= row[i] == best;
                if (!hit) continue;
                for (found = start; row[found] != best; found++) {}
                break;
            }
        }
        out[r] = found;
    }
}
