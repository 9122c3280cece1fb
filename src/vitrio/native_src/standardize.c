/* Each item of a batch given a mean of 0 and a standard deviation of 1, for the Standardize transform
 * (vitrio/data/_standardize.py owns its use); it has no constants of the interface.
 *
 *   standardize(src, out, rows) -> None
 *     `src` holds `rows` items of float32 values one after another, each of as many values; `out`,
 *     as many bytes, receives each item less its mean, over its standard deviation (of the
 *     population), in float32. The sums of the values and their squares are taken in float64 in one
 *     pass, less the mean of the item's first values so that values far from 0 keep their precision
 *     (see standardize_item); then one pass writes. A flat item (deviation 0) becomes zeros; one
 *     holding NaN or infinity becomes NaN.
 *     ValueError if the buffers are not whole float32 values of one size, or do not part into
 *     `rows` items. The GIL is released.
 */
#include "native.h"

#include <math.h>

/* The loops are inlined into one function built twice on x86 (baseline, and AVX2 with FMA), chosen at
 * run time. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("O3")))
#else
#define VECTORIZE
#endif
#if defined(__GNUC__)
#define INLINED VECTORIZE inline __attribute__((always_inline))
#else
#define INLINED inline
#endif
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define X86 1
#endif

/* Lanes of the sums, independent so that the compiler adds them in vector registers without reordering
 * a sum; and the values summed into them before their totals are added up, so that the rounding of a
 * sum grows with BLOCK / LANES + n / BLOCK rather than with n. */
enum { LANES = 8, BLOCK = 1024 };

/* Adds to *sum and *squares the sum of x - shift and of its square over the n <= BLOCK values at x. */
static INLINED void add_sums(const float *x, size_t n, double shift, double *sum, double *squares) {
    double s[LANES] = {0}, q[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (size_t j = 0; j < LANES; j++) {
            double d = (double)x[i + j] - shift;
            s[j] += d;
            q[j] += d * d;
        }
    }
    for (; i < n; i++) {
        double d = (double)x[i] - shift;
        s[0] += d;
        q[0] += d * d;
    }
    for (size_t j = 0; j < LANES; j++) *sum += s[j], *squares += q[j];
}

/* (x - mean) * scale of the n values at x, rounded to float32, into out. */
static INLINED void scaled(const float *x, float *out, size_t n, double mean, double scale) {
    for (size_t i = 0; i < n; i++) out[i] = (float)(((double)x[i] - mean) * scale);
}

/* The n > 0 values at x standardised into out. The sums are of the values less the mean of the first k
 * of them (a block's worth): those k alone spread by k times the square of that shift's distance to
 * the mean, so the squares exceed the spread by at most a factor n / k + 1, which is all the sums can
 * lose to cancellation. */
static INLINED void standardize_values(const float *x, float *out, size_t n) {
    size_t k = n < BLOCK ? n : BLOCK;
    double shift = 0, unused = 0, sum = 0, squares = 0;
    add_sums(x, k, 0, &shift, &unused);
    shift /= (double)k;
    for (size_t start = 0; start < n; start += BLOCK) {
        add_sums(x + start, n - start < BLOCK ? n - start : BLOCK, shift, &sum, &squares);
    }
    double mean = shift + sum / (double)n, spread = squares - sum * sum / (double)n;
    double deviation = sqrt((spread > 0 ? spread : 0) / (double)n);
    /* NaN reaches every value through mean and deviation; only an exact 0 is flat */
    scaled(x, out, n, mean, deviation == 0 ? 1.0 : 1.0 / deviation);
}

VECTORIZE static void standardize_base(const float *x, float *out, size_t n) { standardize_values(x, out, n); }
#ifdef X86
VECTORIZE __attribute__((target("avx2,fma"))) static void standardize_avx2(const float *x, float *out, size_t n) {
    standardize_values(x, out, n);
}
#endif

PyObject *vitrio_standardize(PyObject *self, PyObject *args) {
    Py_buffer src = {0}, out = {0};
    Py_ssize_t rows;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*w*n:standardize", &src, &out, &rows)) return NULL;
    size_t values = (size_t)src.len / sizeof(float);
    if (src.len % (Py_ssize_t)sizeof(float) || out.len != src.len || rows <= 0 || values % (size_t)rows ||
        (uintptr_t)src.buf % _Alignof(float) || (uintptr_t)out.buf % _Alignof(float)) {
        PyErr_SetString(PyExc_ValueError,
                        "src and out are not aligned float32 values of one size that part into rows items");
        goto done;
    }
    size_t n = values / (size_t)rows;
    void (*standardize_item)(const float *, float *, size_t) = standardize_base;
#ifdef X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) standardize_item = standardize_avx2;
#endif
    Py_BEGIN_ALLOW_THREADS;
    for (size_t row = 0; n > 0 && row < (size_t)rows; row++) {
        standardize_item((const float *)src.buf + row * n, (float *)out.buf + row * n, n);
    }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    vitrio_release_views((Py_buffer *const[]){&src, &out, NULL});
    return result;
}
