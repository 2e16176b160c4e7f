/* A linear layer's product for a few rows, x W^T + b, at the memory's speed.
 *
 * A decode step multiplies each weight by only as many rows as there are requests running. Then
 * the product is a read of the weight: a few multiply-adds per float loaded. MKL and oneDNN set
 * up their blocked algorithms for every call and read the weight at well under the memory's
 * speed there (on a 2-core AMD EPYC, SmolLM2's weights at 1 to 8 rows: oneDNN 15-23 GB/s, MKL
 * 8-16 GB/s, where a plain sum of a tensor reads 31-33). This kernel reads each float of the
 * weight once, in order, and keeps every row's running sums in registers.
 *
 * The weight is laid out once (kvviz_pack_panels) as panels of PANEL output columns: panel p
 * holds, for each input k, the PANEL weights W[p*PANEL + j][k] side by side, so a panel is one
 * contiguous run of memory (K x PANEL floats) and the multiply-adds of one input read one
 * run of PANEL floats. Columns past the last output are zeros. Threads share the panels; a thread
 * multiplies its panel by ROWS rows at a time, each row's PANEL sums in registers, and the panel
 * stays in the core's cache for the next ROWS rows.
 *
 * Each output is summed over k in order, one multiply-add per input (fused: fp-contract), so its
 * last bits differ from MKL's and oneDNN's, which sum in other orders, as theirs differ from each
 * other's.
 *
 * Shapes (row-major, float32):
 *   weight  (N, K)                  kvviz_pack_panels' input
 *   panels  (ceil(N / PANEL), K, PANEL)
 *   x       (M, K), rows x_stride floats apart
 *   bias    (N,) or NULL
 *   out     (M, N)
 */
#pragma GCC optimize("fp-contract=fast")

#define PANEL 32 /* output columns per panel: two 16-float vectors */
#define ROWS 8   /* rows multiplied at once: ROWS x PANEL sums held in registers */

void kvviz_pack_panels(const float *weight, float *panels, long n, long k) {
    const long num_panels = (n + PANEL - 1) / PANEL;
    for (long p = 0; p < num_panels; p++) {
        for (long i = 0; i < k; i++) {
            float *dst = panels + (p * k + i) * PANEL;
            for (long j = 0; j < PANEL; j++) {
                const long col = p * PANEL + j;
                dst[j] = col < n ? weight[col * k + i] : 0.0f;
            }
        }
    }
}

/* `rows` (1 to ROWS) rows of x times one panel; the sums of each row land in out[r][0..cols). The
 * row count is a constant in each copy (ROWS_KERNEL below), so the sums stay in registers. */
#define ROWS_KERNEL(R)                                                                           \
    static void rows_##R(const float *x, long x_stride, long k, const float *panel,             \
                         const float *bias, float *out, long out_stride, long cols) {           \
        float sums[R][PANEL];                                                                    \
        for (int r = 0; r < R; r++)                                                              \
            for (int j = 0; j < PANEL; j++) sums[r][j] = 0.0f;                                   \
        for (long i = 0; i < k; i++) {                                                           \
            const float *w = panel + i * PANEL;                                                  \
            for (int r = 0; r < R; r++) {                                                        \
                const float xv = x[r * x_stride + i];                                            \
                _Pragma("omp simd") for (int j = 0; j < PANEL; j++) sums[r][j] += xv * w[j];     \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < R; r++)                                                              \
            for (long j = 0; j < cols; j++)                                                      \
                out[r * out_stride + j] = sums[r][j] + (bias ? bias[j] : 0.0f);                  \
    }
ROWS_KERNEL(1)
ROWS_KERNEL(2)
ROWS_KERNEL(3)
ROWS_KERNEL(4)
ROWS_KERNEL(5)
ROWS_KERNEL(6)
ROWS_KERNEL(7)
ROWS_KERNEL(8)

typedef void (*rows_kernel)(const float *, long, long, const float *, const float *, float *, long, long);
static const rows_kernel KERNELS[ROWS + 1] = {0, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6, rows_7, rows_8};

void kvviz_small_product(const float *x, long m, long x_stride, const float *panels, const float *bias,
                         float *out, long n, long k, int num_threads) {
    const long num_panels = (n + PANEL - 1) / PANEL;
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (long p = 0; p < num_panels; p++) {
        const long first = p * PANEL, cols = n - first < PANEL ? n - first : PANEL;
        const float *panel = panels + p * k * PANEL;
        for (long r = 0; r < m; r += ROWS) {
            const long rows = m - r < ROWS ? m - r : ROWS;
            KERNELS[rows](x + r * x_stride, x_stride, k, panel, bias ? bias + first : 0, out + r * n + first, n,
                          cols);
        }
    }
}
