/* Scaled dropout masks, drawn and written in one multi-threaded pass.
 *
 * Element j of a mask is 0 or the bit pattern of 1/(1-p) in the activations' dtype. Its draw is
 * 16 bits of word j/4 of the SplitMix64 sequence that `seed` starts (word w is the SplitMix64
 * output for seed + (w + 1) * golden gamma), so a mask depends on its seed alone, not on the
 * number of threads. An element is kept when its draw is at least keep_from = round(p * 65536):
 * with probability 1 - p, to 1/65536, as cpuft.speedups.dropout's numpy path computes it too.
 */
#include <stdint.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Four 16-bit mask elements from one word, packed as they lie in memory (little endian). */
static inline uint64_t four16(uint64_t z, uint64_t keep_from, uint64_t scale) {
    uint64_t out = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t draw = (z >> (16 * k)) & 0xFFFFu;
        out |= (draw >= keep_from ? scale : 0) << (16 * k);
    }
    return out;
}

/* n elements of `width` bytes (2, 4 or 8) into out; scale is 1/(1-p) as that dtype's bits. */
void cpuft_dropout_mask(int64_t n, int width, uint64_t seed, uint32_t keep_from, uint64_t scale,
                        void *out) {
    const int64_t words = n / 4;
    if (width == 2) {
        uint16_t *out16 = (uint16_t *)out;
#pragma omp parallel for simd schedule(static) if (words > 8192)
        for (int64_t w = 0; w < words; w++) {
            uint64_t packed = four16(mix(seed + (uint64_t)(w + 1) * GOLDEN), keep_from, scale);
            memcpy(out16 + 4 * w, &packed, sizeof packed);
        }
        if (n % 4) {
            uint64_t packed = four16(mix(seed + (uint64_t)(words + 1) * GOLDEN), keep_from, scale);
            memcpy(out16 + 4 * words, &packed, (size_t)(n % 4) * 2);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (words > 8192)
    for (int64_t w = 0; w <= words; w++) {
        uint64_t z = mix(seed + (uint64_t)(w + 1) * GOLDEN);
        for (int64_t j = 4 * w; j < 4 * w + 4 && j < n; j++) {
            uint64_t value = ((z >> (16 * (j - 4 * w))) & 0xFFFFu) >= keep_from ? scale : 0;
            if (width == 4) {
                ((uint32_t *)out)[j] = (uint32_t)value;
            } else {
                ((uint64_t *)out)[j] = value;
            }
        }
    }
}
