/* Conversions of values and crops of patches, with no Python per image (the GIL released). Its
 * constants (KIND_*, SWAP) belong to vitrio/formats/_raw_layout.py, whose value_kind gives the kind of
 * a dtype; vitrio/formats/_raw.py crops.
 *
 *   Kinds of values: KIND_U8, KIND_I8, KIND_U16, KIND_I16, KIND_F16, KIND_F32, KIND_BYTES (copied as
 *   they are), KIND_BF16. A stored kind may carry SWAP: its values are of the other byte
 *   order. Conversions: any kind but bytes to float32, float16 or bfloat16 (as numpy and ml_dtypes
 *   cast, rounding to nearest even), and any kind to itself.
 *   convert(src, src_kind, out, dst_kind)
 *     Converts the values of `src` into `out`.
 *
 *   read_runs writes a destination of 4 MiB or more with non-temporal stores (x86): faster for
 *   batches (W1, W4 of benchmarks/bench_core.py: 3-15 %), slower for the fresh pages of a whole
 *   volume that convert fills (17 %), so convert does not.
 *
 *   crop(src, offset, src_kind, extents, origins, slots, out, dst_kind, patch, fill)
 *     Crops patches out of one image of `extents` (2 or 3 of them, slowest first) stored at byte
 *     `offset` of `src`: patch i, of shape `patch`, starts at `origins[i]` (int64 rows, any values)
 *     and lands in slot `slots[i]` of `out`, contiguous patches one after another. `fill` (bytes
 *     of one value of the destination kind, or None) fills what lies beyond the image; None leaves it.
 *
 *   simd(enabled) -> bool
 *     Whether conversions use F16C, AVX2 and non-temporal stores where the processor has them (the
 *     default) or the portable loops, so that tests run both; returns whether they were in use.
 */
#include "native.h"

const size_t vitrio_kind_size[KINDS] = {1, 1, 2, 2, 2, 4, 1, 2};
static int has_f16c, has_avx2, cpu_f16c, cpu_avx2; /* in use; what the processor has */
static int streaming = 1;                           /* non-temporal stores in use */

#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("O3")))
#else
#define VECTORIZE
#endif
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define X86 1
#include <immintrin.h>
#endif

/* Integers to float32: one loop the compiler vectorizes, built twice on x86 (baseline and AVX2) and
 * chosen at run time. Values are loaded and stored through memcpy, as every loop here does: a run
 * may start at any byte of a file and land at any byte of its destination. */
#define TO_F32_LOOP(NAME, TYPE, ATTRIBUTES)                                                 \
    ATTRIBUTES static void NAME(const void *restrict src, float *restrict dst, size_t n) { \
        const uint8_t *s = (const uint8_t *)src;                                           \
        uint8_t *d = (uint8_t *)dst;                                                       \
        for (size_t i = 0; i < n; i++) {                                                   \
            TYPE value;                                                                    \
            memcpy(&value, s + i * sizeof value, sizeof value);                            \
            float wide = (float)value;                                                     \
            memcpy(d + i * 4, &wide, 4);                                                   \
        }                                                                                  \
    }
#ifdef X86
#define TO_F32(NAME, TYPE)                                                          \
    TO_F32_LOOP(NAME##_base, TYPE, VECTORIZE)                                       \
    TO_F32_LOOP(NAME##_avx2, TYPE, VECTORIZE __attribute__((target("avx2"))))       \
    static void NAME(const void *restrict src, float *restrict dst, size_t n) {     \
        (has_avx2 ? NAME##_avx2 : NAME##_base)(src, dst, n);                        \
    }
#else
#define TO_F32(NAME, TYPE) TO_F32_LOOP(NAME, TYPE, VECTORIZE)
#endif
TO_F32(u8_f32, uint8_t)
TO_F32(i8_f32, int8_t)
TO_F32(u16_f32, uint16_t)
TO_F32(i16_f32, int16_t)

/* float16 to float32, exact (F. Giesen's half_to_float). */
VECTORIZE static void f16_f32_portable(const void *restrict src, float *restrict dst, size_t n) {
    const uint8_t *s = (const uint8_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint16_t half;
        memcpy(&half, s + 2 * i, 2);
        uint32_t h = half, o = (h & 0x7fffu) << 13, exponent = o & (0x7c00u << 13);
        o += (uint32_t)(127 - 15) << 23;
        if (exponent == (0x7c00u << 13)) {
            o += (uint32_t)(128 - 16) << 23; /* infinity, NaN */
        } else if (exponent == 0) {          /* zero, subnormal */
            float f, magic;
            uint32_t magic_bits = 113u << 23;
            o += 1u << 23;
            memcpy(&f, &o, 4);
            memcpy(&magic, &magic_bits, 4);
            f -= magic;
            memcpy(&o, &f, 4);
        }
        o |= (h & 0x8000u) << 16;
        memcpy(dst + i, &o, 4);
    }
}

/* float32 to float16, rounding to nearest even as numpy does (F. Giesen's float_to_half_fast3_rtne);
 * NaN stays NaN. */
VECTORIZE static void f32_f16_portable(const float *restrict src, uint16_t *restrict dst, size_t n) {
    const uint32_t infinity = 255u << 23, too_large = (127u + 16) << 23;
    const uint32_t denorm_bits = ((127u - 15) + (23 - 10) + 1) << 23;
    float denorm;
    memcpy(&denorm, &denorm_bits, 4);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, 4);
        uint32_t sign = u & 0x80000000u;
        u ^= sign;
        uint16_t o;
        if (u >= too_large) {
            o = u > infinity ? 0x7e00 | (uint16_t)((u >> 13) & 0x3ff) : 0x7c00;
        } else if (u < (113u << 23)) {
            float f;
            memcpy(&f, &u, 4);
            f += denorm;
            memcpy(&u, &f, 4);
            o = (uint16_t)(u - denorm_bits);
        } else {
            u += ((uint32_t)(15 - 127) << 23) + 0xfff + ((u >> 13) & 1);
            o = (uint16_t)(u >> 13);
        }
        o |= (uint16_t)(sign >> 16);
        memcpy(dst + i, &o, 2);
    }
}

#ifdef X86
__attribute__((target("avx,f16c"))) static void f16_f32_f16c(const void *restrict src, float *restrict dst,
                                                             size_t n) {
    const uint8_t *s = (const uint8_t *)src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    f16_f32_portable(s + 2 * i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f32_f16_f16c(const float *restrict src, uint16_t *restrict dst,
                                                             size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    f32_f16_portable(src + i, dst + i, n - i);
}
#endif

static void f16_f32(const void *restrict src, float *restrict dst, size_t n) {
#ifdef X86
    if (has_f16c) return f16_f32_f16c(src, dst, n);
#endif
    f16_f32_portable(src, dst, n);
}

static void f32_f16(const float *restrict src, uint16_t *restrict dst, size_t n) {
#ifdef X86
    if (has_f16c) return f32_f16_f16c(src, dst, n);
#endif
    f32_f16_portable(src, dst, n);
}

static void f32_f32(const void *restrict src, float *restrict dst, size_t n) { memcpy(dst, src, n * 4); }

VECTORIZE static void bf16_f32(const void *restrict src, float *restrict dst, size_t n) {
    const uint8_t *s = (const uint8_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint16_t half;
        memcpy(&half, s + 2 * i, 2);
        uint32_t wide = (uint32_t)half << 16;
        memcpy(dst + i, &wide, 4);
    }
}

/* float32 to bfloat16, rounding to nearest even as ml_dtypes does; NaN stays NaN (made quiet). */
VECTORIZE static void f32_bf16(const float *restrict src, uint16_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, 4);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint16_t o = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
        memcpy(dst + i, &o, 2);
    }
}

typedef void (*ToFloat)(const void *restrict, float *restrict, size_t);
static const ToFloat to_f32[KINDS] = {u8_f32, i8_f32, u16_f32, i16_f32, f16_f32, f32_f32, NULL, bf16_f32};

/* float32 to a kind of two bytes: float16 or bfloat16. */
static void narrow(int dst_kind, const float *src, uint16_t *dst, size_t n) {
    if (dst_kind == K_BF16)
        f32_bf16(src, dst, n);
    else
        f32_f16(src, dst, n);
}

VECTORIZE static void swap_bytes(void *values, size_t n, size_t size) {
    if (size == 2) {
        uint16_t *v = (uint16_t *)values;
        for (size_t i = 0; i < n; i++) v[i] = (uint16_t)((v[i] >> 8) | (v[i] << 8));
    } else if (size == 4) {
        uint32_t *v = (uint32_t *)values;
        for (size_t i = 0; i < n; i++) v[i] = __builtin_bswap32(v[i]);
    }
}

enum { CHUNK = 2048 };

/* Converts n values of kind `src_kind` (SWAP included) at src into kind dst_kind at dst. */
static void convert_values(int src_kind, int dst_kind, const void *src, void *dst, size_t n) {
    int kind = src_kind & ~SWAP, swap = (src_kind & SWAP) && vitrio_kind_size[kind] > 1;
    size_t size = vitrio_kind_size[kind];
    if (!swap && kind == dst_kind) {
        memcpy(dst, src, n * size);
        return;
    }
    if (!swap && dst_kind == K_F32) {
        to_f32[kind](src, dst, n);
        return;
    }
    _Alignas(32) uint8_t stored[CHUNK * 4];
    _Alignas(32) float wide[CHUNK];
    for (size_t done = 0; done < n; done += CHUNK) {
        size_t m = n - done < CHUNK ? n - done : CHUNK;
        const uint8_t *from = (const uint8_t *)src + done * size;
        uint8_t *to = (uint8_t *)dst + done * vitrio_kind_size[dst_kind];
        if (swap) {
            memcpy(stored, from, m * size);
            swap_bytes(stored, m, size);
            from = stored;
        }
        if (kind == dst_kind)
            memcpy(to, from, m * size);
        else if (dst_kind == K_F32)
            to_f32[kind](from, (float *)to, m);
        else if (kind == K_F32)
            narrow(dst_kind, (const float *)from, (uint16_t *)to, m);
        else {
            to_f32[kind](from, wide, m);
            narrow(dst_kind, wide, (uint16_t *)to, m);
        }
    }
}

/* Destinations of STREAM_MIN_BYTES or more (native.h) are written in blocks of STREAM_BLOCK bytes. */
enum { STREAM_BLOCK = 8192 };

#ifdef X86
/* Copies `bytes` from src to dst, dst's aligned middle with non-temporal stores. */
static void stream_copy(uint8_t *dst, const uint8_t *src, size_t bytes) {
    size_t head = (size_t)(-(uintptr_t)dst & 15);
    if (head > bytes) head = bytes;
    memcpy(dst, src, head);
    size_t i = head;
    for (; i + 16 <= bytes; i += 16) _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
    memcpy(dst + i, src + i, bytes - i);
}

/* As convert_values, writing dst with non-temporal stores: each block converted in the cache first. */
static void convert_streaming(int src_kind, int dst_kind, const void *src, void *dst, size_t n) {
    size_t in_size = vitrio_kind_size[src_kind & ~SWAP], out_size = vitrio_kind_size[dst_kind];
    if (src_kind == dst_kind) {
        stream_copy(dst, src, n * in_size);
        return;
    }
    _Alignas(64) uint8_t block[STREAM_BLOCK];
    size_t per_block = STREAM_BLOCK / out_size;
    for (size_t done = 0; done < n; done += per_block) {
        size_t m = n - done < per_block ? n - done : per_block;
        convert_values(src_kind, dst_kind, (const uint8_t *)src + done * in_size, block, m);
        stream_copy((uint8_t *)dst + done * out_size, block, m * out_size);
    }
}
#endif

/* convert_values, streaming into `dst` when `stream` (and the processor can); end with vitrio_stream_fence. */
void vitrio_convert_into(int src_kind, int dst_kind, const void *src, void *dst, size_t n, int stream) {
#ifdef X86
    if (stream && streaming) return convert_streaming(src_kind, dst_kind, src, dst, n);
#endif
    (void)stream;
    convert_values(src_kind, dst_kind, src, dst, n);
}

/* Orders the non-temporal stores before what follows (another thread reading the destination). */
void vitrio_stream_fence(void) {
#ifdef X86
    _mm_sfence();
#endif
}

/* Whether values of src_kind convert to dst_kind. */
static int convertible(long src_kind, long dst_kind) {
    long kind = src_kind & ~(long)SWAP;
    if (kind < 0 || kind >= KINDS || (src_kind & ~(long)(SWAP | 0xff)) || dst_kind < 0 || dst_kind >= KINDS)
        return 0;
    if (kind == K_BYTES || dst_kind == K_BYTES) return kind == dst_kind && !(src_kind & SWAP);
    return kind == dst_kind || dst_kind == K_F32 || dst_kind == K_F16 || dst_kind == K_BF16;
}

int vitrio_bad_kinds(long src_kind, long dst_kind) {
    if (convertible(src_kind, dst_kind)) return 0;
    PyErr_Format(PyExc_ValueError, "no conversion from kind %ld to kind %ld", src_kind, dst_kind);
    return 1;
}

PyObject *vitrio_convert(PyObject *self, PyObject *args) {
    Py_buffer src = {0}, out = {0};
    long src_kind, dst_kind;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*lw*l:convert", &src, &src_kind, &out, &dst_kind)) return NULL;
    if (vitrio_bad_kinds(src_kind, dst_kind)) goto done;
    size_t n = (size_t)src.len / vitrio_kind_size[src_kind & ~SWAP];
    if ((size_t)src.len % vitrio_kind_size[src_kind & ~SWAP] || (size_t)out.len < n * vitrio_kind_size[dst_kind]) {
        PyErr_SetString(PyExc_ValueError, "src is not whole values, or out is too small for them");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    convert_values((int)src_kind, (int)dst_kind, src.buf, out.buf, n);
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    vitrio_release_views((Py_buffer *const[]){&src, &out, NULL});
    return result;
}

/* Fills n values of `size` bytes at dst with `value`: one value, then copies of what is filled. */
static void fill_values(uint8_t *dst, size_t n, const uint8_t *value, size_t size) {
    if (n == 0) return;
    size_t total = n * size, done = size;
    memcpy(dst, value, size);
    while (done < total) {
        size_t step = done < total - done ? done : total - done;
        memcpy(dst + done, dst, step);
        done += step;
    }
}

#define PATCH_LIMIT ((int64_t)1 << 40)
enum { PREFETCH_ROWS = 8, PREFETCH_LINES = 16, LINE = 64 };

/* Asks for the first lines of a row that is read soon. */
static inline void prefetch_row(const uint8_t *row, size_t bytes) {
    for (size_t at = 0; at < bytes && at < PREFETCH_LINES * LINE; at += LINE) __builtin_prefetch(row + at, 0, 0);
}

PyObject *vitrio_crop(PyObject *self, PyObject *args) {
    Py_buffer src = {0}, origins = {0}, slots = {0}, out = {0}, fill = {0};
    PyObject *extents_obj, *patch_obj, *fill_obj, *result = NULL;
    Py_ssize_t offset;
    long src_kind, dst_kind;
    int has_fill = 0;
    if (!PyArg_ParseTuple(args, "y*nlOy*y*w*lOO:crop", &src, &offset, &src_kind, &extents_obj, &origins, &slots,
                          &out, &dst_kind, &patch_obj, &fill_obj))
        return NULL;
    int64_t extents[3] = {1, 1, 1}, patch[3] = {1, 1, 1};
    Py_ssize_t rank = 0;
    if (vitrio_bad_kinds(src_kind, dst_kind)) goto done;
    if (!PyTuple_Check(extents_obj) || !PyTuple_Check(patch_obj) || PyTuple_Size(extents_obj) < 2 ||
        PyTuple_Size(extents_obj) > 3 || PyTuple_Size(patch_obj) != PyTuple_Size(extents_obj)) {
        PyErr_SetString(PyExc_ValueError, "extents and patch are tuples of 2 or 3 sizes");
        goto done;
    }
    rank = PyTuple_Size(extents_obj);
    for (Py_ssize_t a = 0; a < rank; a++) {
        long long e = PyLong_AsLongLong(PyTuple_GetItem(extents_obj, a));
        long long p = PyLong_AsLongLong(PyTuple_GetItem(patch_obj, a));
        if (PyErr_Occurred()) goto done;
        if (e < 0 || e >= PATCH_LIMIT || p < 0 || p >= PATCH_LIMIT) {
            PyErr_SetString(PyExc_ValueError, "extents and patch sizes are out of range");
            goto done;
        }
        extents[3 - rank + a] = e, patch[3 - rank + a] = p;
    }
    size_t in_size = vitrio_kind_size[src_kind & ~SWAP], out_size = vitrio_kind_size[dst_kind];
    uint64_t image_values = 1, patch_values = 1;
    int too_large = 0;
    for (int a = 0; a < 3; a++)
        too_large |= __builtin_mul_overflow(image_values, (uint64_t)extents[a], &image_values) |
                     __builtin_mul_overflow(patch_values, (uint64_t)patch[a], &patch_values);
    if (too_large || image_values > (uint64_t)PY_SSIZE_T_MAX / 8 || patch_values > (uint64_t)PY_SSIZE_T_MAX / 8) {
        PyErr_SetString(PyExc_ValueError, "extents or patch too large");
        goto done;
    }
    if (offset < 0 || (uint64_t)offset > (uint64_t)src.len || image_values * in_size > (uint64_t)(src.len - offset)) {
        PyErr_SetString(PyExc_ValueError, "the image lies outside src");
        goto done;
    }
    Py_ssize_t n = slots.len / 8;
    if (slots.len % 8 || origins.len != n * rank * 8) {
        PyErr_SetString(PyExc_ValueError, "slots are int64, origins int64 rows of the rank, one per slot");
        goto done;
    }
    const int64_t *slot = (const int64_t *)slots.buf, *origin = (const int64_t *)origins.buf;
    uint64_t patch_bytes = patch_values * out_size;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = slot[i] >= 0 && (patch_bytes == 0 || (uint64_t)slot[i] < (uint64_t)out.len / patch_bytes);
        for (Py_ssize_t a = 0; a < rank; a++) ok = ok && origin[i * rank + a] > -PATCH_LIMIT && origin[i * rank + a] < PATCH_LIMIT;
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "patch %zd lies outside out, or its origin is out of range", i);
            goto done;
        }
    }
    if (fill_obj != Py_None) {
        if (PyObject_GetBuffer(fill_obj, &fill, PyBUF_SIMPLE) < 0) goto done;
        has_fill = 1;
        if ((size_t)fill.len != out_size) {
            PyErr_SetString(PyExc_ValueError, "fill is the bytes of one value of the destination");
            goto done;
        }
    }
    const uint8_t *image = (const uint8_t *)src.buf + offset;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t o[3] = {0, 0, 0}, low[3], high[3];
        for (Py_ssize_t a = 0; a < rank; a++) o[3 - rank + a] = origin[i * rank + a];
        int clipped = 0, empty = 0;
        for (int a = 0; a < 3; a++) {
            low[a] = o[a] < 0 ? 0 : o[a] > extents[a] ? extents[a] : o[a];
            int64_t end = o[a] + patch[a];
            high[a] = end < 0 ? 0 : end > extents[a] ? extents[a] : end;
            clipped |= low[a] != o[a] || high[a] != end;
            empty |= high[a] <= low[a];
        }
        uint8_t *dst = (uint8_t *)out.buf + (size_t)slot[i] * patch_bytes;
        if (clipped && has_fill) fill_values(dst, patch_values, fill.buf, out_size);
        if (empty) continue;
        size_t width = (size_t)(high[2] - low[2]), row_bytes = width * in_size;
        size_t stride = (size_t)extents[2] * in_size, rows = (size_t)(high[1] - low[1]);
        for (int64_t z = low[0]; z < high[0]; z++) {
            const uint8_t *plane = image + (((size_t)z * extents[1] + low[1]) * extents[2] + low[2]) * in_size;
            uint8_t *to = dst + (((size_t)(z - o[0]) * patch[1] + (low[1] - o[1])) * patch[2] + (low[2] - o[2])) * out_size;
            for (size_t y = 0; y < rows; y++, to += (size_t)patch[2] * out_size) {
                /* rows lie a page or more apart: fetch rows ahead (their page walks too), or the copy
                 * waits for each row's first line, which the processor does not fetch ahead across pages */
                if (y + PREFETCH_ROWS < rows) prefetch_row(plane + (y + PREFETCH_ROWS) * stride, row_bytes);
                convert_values((int)src_kind, (int)dst_kind, plane + y * stride, to, width);
            }
        }
    }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    vitrio_release_views((Py_buffer *const[]){&src, &origins, &slots, &out, &fill, NULL});
    return result;
}

/* simd(enabled): whether conversions use the processor's vector extensions (F16C, AVX2) where it has
 * them; False runs the portable loops, for tests. Returns whether they were in use. */
PyObject *vitrio_simd(PyObject *self, PyObject *args) {
    int enabled, was = streaming;
    if (!PyArg_ParseTuple(args, "p:simd", &enabled)) return NULL;
    has_f16c = enabled && cpu_f16c;
    has_avx2 = enabled && cpu_avx2;
    streaming = enabled;
    return PyBool_FromLong(was);
}

/* Has conversions use the vector extensions the processor has. */
void vitrio_convert_init(void) {
#ifdef X86
    __builtin_cpu_init();
    has_f16c = cpu_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    has_avx2 = cpu_avx2 = __builtin_cpu_supports("avx2");
#endif
}
