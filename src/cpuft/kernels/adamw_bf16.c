/* AdamW for bf16 weights with fp32 masters, in one pass over memory.
 *
 * torch's fused AdamW needs the gradient in the parameter's dtype, so bf16 training with fp32
 * masters used to take four passes: cast the bf16 gradients into fp32 ones, the AdamW step, the
 * gradient norm over the fp32 gradients, and a cast of the masters back into the bf16 weights.
 * Here the step reads each bf16 gradient once and writes the bf16 weight as it writes the master:
 * 28 bytes a parameter moved instead of 48.
 *
 * cpuft_adamw_rows steps a word embedding from the rows a batch used: the dense step's result,
 * without the dense gradient, which is all zeros but for those rows.
 *
 * The math is torch's AdamW (decoupled weight decay), in fp32. The threads are the OpenMP ones
 * torch already runs: this library is linked against libgomp.so.1, which torch has loaded.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

static inline float from_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even, as c10::BFloat16 does; NaN stays NaN. */
static inline uint16_t to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    return f != f ? (uint16_t)0x7FC0 : (uint16_t)rounded;
}

/* This thread's share [*lo, *hi) of `total` elements, cut evenly across the tensors. */
static void share(int64_t total, int64_t *lo, int64_t *hi) {
    int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    *lo = total * me / threads;
    *hi = total * (me + 1) / threads;
}

/* Squares are summed in float in LANES independent accumulators (a single one waits on its
 * own previous add and ran at a quarter of the memory's pace), over blocks whose sums go into
 * a double. */
#define LANES 64
#define SQUARES_BLOCK 4096

/* Sum of squares of n bf16 tensors: in float over blocks, the blocks' sums in double. */
double cpuft_bf16_sum_squares(int n, uint16_t *const *grads, const int64_t *sizes) {
    int64_t total = 0;
    for (int t = 0; t < n; t++) total += sizes[t];
    double sum = 0.0;
#pragma omp parallel reduction(+ : sum)
    {
        int64_t lo, hi, start = 0;
        share(total, &lo, &hi);
        for (int t = 0; t < n && start < hi; start += sizes[t], t++) {
            int64_t a = lo > start ? lo - start : 0;
            int64_t b = hi - start < sizes[t] ? hi - start : sizes[t];
            const uint16_t *g = grads[t];
            for (int64_t block = a; block < b; block += SQUARES_BLOCK) {
                int64_t end = b - block < SQUARES_BLOCK ? b : block + SQUARES_BLOCK;
                float lanes[LANES] = {0.0f};
                int64_t i = block;
                for (; i + LANES <= end; i += LANES) {
                    __builtin_prefetch(g + i + 16 * LANES);
#pragma omp simd
                    for (int j = 0; j < LANES; j++) {
                        float x = from_bf16(g[i + j]);
                        lanes[j] += x * x;
                    }
                }
                for (; i < end; i++) {
                    float x = from_bf16(g[i]);
                    lanes[0] += x * x;
                }
                double part = 0.0;
                for (int j = 0; j < LANES; j++) part += (double)lanes[j];
                sum += part;
            }
        }
    }
    return sum;
}

/* What a step applies to every element of one tensor. */
typedef struct {
    float keep, step_size, bc2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, divisor;
} Hyper;

/* torch's AdamW on element i of p; returns the updated value. */
static inline float adamw_update(int64_t i, float grad, float *p, float *m, float *v, Hyper h) {
    float g = grad / h.divisor;
    float param = p[i] * h.keep;
    float mi = m[i] + h.one_minus_beta1 * (g - m[i]);
    float vi = h.beta2 * v[i] + h.one_minus_beta2 * g * g;
    param -= h.step_size * mi / (sqrtf(vi) / h.bc2_sqrt + h.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = param;
    return param;
}

/* torch's AdamW on element i; the master rounded into the bf16 weight. */
static inline void adamw_at(int64_t i, float grad, float *p, float *m, float *v, uint16_t *w,
                            Hyper h) {
    w[i] = to_bf16(adamw_update(i, grad, p, m, v, h));
}

/* One AdamW step on n tensors. grads16 (bf16) or grads32 (fp32) holds the gradients; the other
 * is NULL. Per tensor: decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^step),
 * bc2_sqrt = sqrt(1 - beta2^step). 1 - beta1 and 1 - beta2 come in as the caller computed them
 * (in double, as torch does: 1.0f - 0.999f is 1.3e-5 off 0.001). Every gradient is divided by
 * grad_divisor (clipping) first. The masters are updated in place and rounded into the bf16
 * weights. */
void cpuft_adamw_bf16(int n, uint16_t *const *grads16, float *const *grads32,
                      float *const *masters, float *const *exp_avgs, float *const *exp_avg_sqs,
                      uint16_t *const *weights, const int64_t *sizes, const float *decay,
                      const float *step_size, const float *bc2_sqrt, float one_minus_beta1,
                      float beta2, float one_minus_beta2, float eps, float grad_divisor) {
    int64_t total = 0;
    for (int t = 0; t < n; t++) total += sizes[t];
#pragma omp parallel
    {
        int64_t lo, hi, start = 0;
        share(total, &lo, &hi);
        for (int t = 0; t < n && start < hi; start += sizes[t], t++) {
            int64_t a = lo > start ? lo - start : 0;
            int64_t b = hi - start < sizes[t] ? hi - start : sizes[t];
            if (a >= b) continue;
            float *p = masters[t], *m = exp_avgs[t], *v = exp_avg_sqs[t];
            uint16_t *w = weights[t];
            const Hyper h = {decay[t], step_size[t], bc2_sqrt[t], one_minus_beta1, beta2,
                             one_minus_beta2, eps, grad_divisor};
            if (grads16 != NULL) {
                const uint16_t *g16 = grads16[t];
#pragma omp simd
                for (int64_t i = a; i < b; i++) adamw_at(i, from_bf16(g16[i]), p, m, v, w, h);
            } else {
                const float *g32 = grads32[t];
#pragma omp simd
                for (int64_t i = a; i < b; i++) adamw_at(i, g32[i], p, m, v, w, h);
            }
        }
    }
}

/* The first of the n sorted `rows` that is at least `row` (n where none is). */
static int64_t first_at_least(const int64_t *rows, int64_t n, int64_t row) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rows[mid] < row) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* torch's dense AdamW step on an fp32 table of n_rows x width (a word embedding) whose gradient
 * is zero but in the n_used distinct `used` rows (sorted), given as `values` (n_used x width).
 * Every row is updated as the dense step updates it (an unused row's moments decay, and weight
 * decay applies), but only the used rows' gradients are read: no dense gradient is written,
 * zeroed or read. Terms as in cpuft_adamw_bf16. */
void cpuft_adamw_rows(float *table, float *exp_avg, float *exp_avg_sq, int64_t n_rows,
                      int64_t width, const int64_t *used, const float *values, int64_t n_used,
                      float decay, float step_size, float bc2_sqrt, float one_minus_beta1,
                      float beta2, float one_minus_beta2, float eps, float grad_divisor) {
    const Hyper h = {decay, step_size, bc2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                     grad_divisor};
#pragma omp parallel
    {
        int64_t lo, hi;
        share(n_rows, &lo, &hi);
        int64_t next = first_at_least(used, n_used, lo);
        for (int64_t r = lo; r < hi; r++) {
            float *p = table + r * width, *m = exp_avg + r * width, *v = exp_avg_sq + r * width;
            if (next < n_used && used[next] == r) {
                const float *g = values + next * width;
#pragma omp simd
                for (int64_t i = 0; i < width; i++) adamw_update(i, g[i], p, m, v, h);
                next++;
            } else {
#pragma omp simd
                for (int64_t i = 0; i < width; i++) adamw_update(i, 0.0f, p, m, v, h);
            }
        }
    }
}
