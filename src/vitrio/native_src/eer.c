/* Decoding of EER frames: run lengths of electron events and their sub-pixel positions. Its constants
 * (RENDER_*, EER_*) belong to vitrio/formats/eer: _reader.py picks the kind of image, _layout.py reads
 * the statuses.
 *
 * A frame (or one strip of it) is a stream of codes read least significant
 * bit first. A code starts with `rlebits` bits, a run of pixels without an
 * event. A run of all ones (2**rlebits - 1) is a skip: the run continues in
 * the next code. Any other run is followed by `hbits` and then `vbits` bits,
 * the sub-pixel position of an event in the pixel after the run; the next run
 * counts from the pixel after that. The stored sub-pixel values have their
 * top bit flipped: value ^ 2**(bits - 1) is the position on the sub-pixel
 * grid. The code whose run ends exactly at the end of the strip ends it.
 *
 * Functions (both release the GIL while they decode; strips is a C-contiguous
 * int64 array of rows (start, length, first_row, rows), each the bytes of one
 * strip in `data` and the rows of the image it covers):
 *
 *   render(data, strips, out, kind, clear, (height, width, rlebits, hbits, vbits),
 *          (shift_y, shift_x), (out_height, out_width),
 *          gain, (gain_height, gain_width), (gain_shift_y, gain_shift_x))
 *     Adds the events of every strip into `out` (kind RENDER_U8, RENDER_U16,
 *     RENDER_U32 or RENDER_F32), at out[fy >> shift_y, fx >> shift_x] where
 *     (fy, fx) is an event's position on the sub-pixel grid. With a gain
 *     (float32, or None) each event adds gain[fy >> gain_shift_y, fx >> gain_shift_x]
 *     instead of one, and out must be float32. `clear` zeroes out first.
 *
 *   events(data, strips, positions, counts, (height, width, rlebits, hbits, vbits))
 *     Writes the (fy, fx) rows of the events of every strip into `positions`
 *     (uint32, room for len // 8 rows) and the number of events of each strip
 *     into `counts` (int64).
 *
 * Both return None, or (strip, error) for the first strip that is bad, with
 * error EER_TRUNCATED: the stream ends before the end of the strip, EER_PAST_END: a run goes
 * past the end of the strip, EER_FULL: more events than there is room for.
 */
#include "native.h"

typedef struct {
    uint32_t width;
    unsigned rlebits, hbits, vbits;
} Code;

/* 64 bits of the stream from bit `bit` on (at least 57 of them valid), zeros past its end. */
static inline uint64_t load_bits(const uint8_t *data, size_t size, uint64_t bit) {
    size_t byte = (size_t)(bit >> 3);
    uint64_t value = 0;
    if (byte + 8 <= size) {
        memcpy(&value, data + byte, 8);
#if PY_BIG_ENDIAN
        value = __builtin_bswap64(value);
#endif
    } else {
        for (size_t i = 0; byte + i < size; i++) value |= (uint64_t)data[byte + i] << (8 * i);
    }
    return value >> (bit & 7);
}

/* A decoder of one strip for each kind of sink. EMIT(sink, index, fy, fx) takes one event: its
 * index in an image of the strip's height and width, and its position on the sub-pixel grid (the
 * arguments are expressions, evaluated only where EMIT uses them); it may return an error code. */
#define DEFINE_DECODER(NAME, SINK, EMIT)                                                           \
    static int NAME(const uint8_t *data, size_t size, const Code *code, uint32_t row0,             \
                    uint32_t rows, SINK *sink) {                                                   \
        const uint64_t nbits = (uint64_t)size * 8;                                                 \
        const unsigned rb = code->rlebits, hb = code->hbits, vb = code->vbits;                     \
        const unsigned cb = rb + hb + vb;                                                          \
        const uint32_t skip = (1u << rb) - 1;                                                      \
        const uint32_t hmask = (1u << hb) - 1, vmask = (1u << vb) - 1;                             \
        const uint32_t hflip = hb ? 1u << (hb - 1) : 0, vflip = vb ? 1u << (vb - 1) : 0;           \
        const uint64_t width = code->width, end = (uint64_t)rows * width, base = row0 * width;     \
        uint64_t bit = 0, pos = 0, x = 0;                                                          \
        uint32_t y = row0;                                                                         \
        for (;;) {                                                                                 \
            if (bit + rb > nbits) return EER_TRUNCATED;                                            \
            uint64_t value = load_bits(data, size, bit);                                           \
            uint32_t run = (uint32_t)value & skip;                                                 \
            pos += run;                                                                            \
            x += run;                                                                              \
            if (run == skip) {                                                                     \
                if (pos > end) return EER_PAST_END;                                                \
                bit += rb;                                                                         \
                continue;                                                                          \
            }                                                                                      \
            if (pos >= end) return pos == end ? EER_OK : EER_PAST_END;                             \
            if (bit + cb > nbits) return EER_TRUNCATED;                                            \
            bit += cb;                                                                             \
            if (x >= width) {                                                                      \
                y += (uint32_t)(x / width);                                                        \
                x %= width;                                                                        \
            }                                                                                      \
            uint32_t sub = (uint32_t)(value >> rb);                                                \
            (void)sub, (void)hmask, (void)vmask, (void)hflip, (void)vflip, (void)base;             \
            int status = EMIT(sink, base + pos, (y << vb) | (((sub >> hb) & vmask) ^ vflip),       \
                              ((uint32_t)x << hb) | ((sub & hmask) ^ hflip));                      \
            if (status) return status;                                                             \
            pos++;                                                                                 \
            x++;                                                                                   \
        }                                                                                          \
    }

typedef struct {
    void *out;
    const float *gain;
    uint32_t out_width, gain_width;
    unsigned shift_y, shift_x, gain_shift_y, gain_shift_x;
} Image;

/* Images at the detector's resolution and width, indexed by pixel. */
#define EMIT_PIXEL(TYPE, ONE, sink, index) (((TYPE *)(sink)->out)[index] += (ONE), 0)
#define EMIT_PIXEL_U8(sink, index, fy, fx) EMIT_PIXEL(uint8_t, 1, sink, index)
#define EMIT_PIXEL_U16(sink, index, fy, fx) EMIT_PIXEL(uint16_t, 1, sink, index)
#define EMIT_PIXEL_U32(sink, index, fy, fx) EMIT_PIXEL(uint32_t, 1, sink, index)
#define EMIT_PIXEL_F32(sink, index, fy, fx) EMIT_PIXEL(float, 1.0f, sink, index)

/* Images binned or finer than the detector, indexed by sub-pixel position. */
#define OUT_INDEX(s, fy, fx) ((size_t)((fy) >> (s)->shift_y) * (s)->out_width + ((fx) >> (s)->shift_x))
#define GAIN_INDEX(s, fy, fx) \
    ((size_t)((fy) >> (s)->gain_shift_y) * (s)->gain_width + ((fx) >> (s)->gain_shift_x))
#define EMIT_FINE(TYPE, ONE, sink, fy, fx) (((TYPE *)(sink)->out)[OUT_INDEX(sink, fy, fx)] += (ONE), 0)
#define EMIT_FINE_U8(sink, index, fy, fx) EMIT_FINE(uint8_t, 1, sink, fy, fx)
#define EMIT_FINE_U16(sink, index, fy, fx) EMIT_FINE(uint16_t, 1, sink, fy, fx)
#define EMIT_FINE_U32(sink, index, fy, fx) EMIT_FINE(uint32_t, 1, sink, fy, fx)
#define EMIT_FINE_F32(sink, index, fy, fx) EMIT_FINE(float, 1.0f, sink, fy, fx)
#define EMIT_GAIN(sink, index, fy, fx) EMIT_FINE(float, (sink)->gain[GAIN_INDEX(sink, fy, fx)], sink, fy, fx)

DEFINE_DECODER(decode_pixel_u8, Image, EMIT_PIXEL_U8)
DEFINE_DECODER(decode_pixel_u16, Image, EMIT_PIXEL_U16)
DEFINE_DECODER(decode_pixel_u32, Image, EMIT_PIXEL_U32)
DEFINE_DECODER(decode_pixel_f32, Image, EMIT_PIXEL_F32)
DEFINE_DECODER(decode_fine_u8, Image, EMIT_FINE_U8)
DEFINE_DECODER(decode_fine_u16, Image, EMIT_FINE_U16)
DEFINE_DECODER(decode_fine_u32, Image, EMIT_FINE_U32)
DEFINE_DECODER(decode_fine_f32, Image, EMIT_FINE_F32)
DEFINE_DECODER(decode_gain, Image, EMIT_GAIN)

typedef struct {
    uint32_t *positions;
    size_t count, capacity;
} Events;

static inline int emit_event(Events *s, uint32_t fy, uint32_t fx) {
    if (s->count == s->capacity) return EER_FULL;
    s->positions[2 * s->count] = fy;
    s->positions[2 * s->count + 1] = fx;
    s->count++;
    return 0;
}

#define EMIT_EVENT(sink, index, fy, fx) emit_event(sink, fy, fx)

DEFINE_DECODER(decode_events, Events, EMIT_EVENT)

typedef int (*ImageDecoder)(const uint8_t *, size_t, const Code *, uint32_t, uint32_t, Image *);

static const ImageDecoder pixel_decoders[4] = {decode_pixel_u8, decode_pixel_u16, decode_pixel_u32,
                                               decode_pixel_f32};
static const ImageDecoder fine_decoders[4] = {decode_fine_u8, decode_fine_u16, decode_fine_u32, decode_fine_f32};
static const Py_ssize_t kind_sizes[4] = {1, 2, 4, 4};

/* Checks the code parameters and the strips table against the data and the image height. */
static int check_layout(const Py_buffer *data, const Py_buffer *strips, Py_ssize_t height, Py_ssize_t width,
                        int rlebits, int hbits, int vbits, Code *code) {
    if (rlebits < 1 || rlebits > 16 || hbits < 0 || hbits > 8 || vbits < 0 || vbits > 8) {
        PyErr_Format(PyExc_ValueError, "unsupported EER code: %d run bits, %d+%d sub-pixel bits", rlebits,
                     hbits, vbits);
        return -1;
    }
    if (width < 1 || height < 0 || (uint64_t)width > (UINT32_MAX >> hbits) ||
        (uint64_t)height > (UINT32_MAX >> vbits)) {
        PyErr_SetString(PyExc_ValueError, "image size out of range");
        return -1;
    }
    if (strips->len % 32) {
        PyErr_SetString(PyExc_ValueError, "strips must be an int64 array of rows of 4");
        return -1;
    }
    const int64_t *rows = (const int64_t *)strips->buf;
    Py_ssize_t n = strips->len / 32;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *s = rows + 4 * i;
        if (s[0] < 0 || s[1] < 0 || s[0] > data->len || s[1] > data->len - s[0] || s[2] < 0 || s[3] < 0 ||
            s[2] > height || s[3] > height - s[2]) {
            PyErr_Format(PyExc_ValueError, "strip %zd lies outside the data or the image", i);
            return -1;
        }
    }
    code->width = (uint32_t)width;
    code->rlebits = (unsigned)rlebits;
    code->hbits = (unsigned)hbits;
    code->vbits = (unsigned)vbits;
    return 0;
}

/* Whether an image of out_h x out_w, indexed by sub-pixel coordinates shifted right,
 * holds every position of a height x width image with the given sub-pixel bits. */
static int covers(Py_ssize_t height, Py_ssize_t width, const Code *code, int shift_y, int shift_x,
                  Py_ssize_t out_h, Py_ssize_t out_w) {
    if (shift_y < 0 || shift_y > 31 || shift_x < 0 || shift_x > 31 || out_h < 0 || out_w < 0 ||
        (uint64_t)out_w > UINT32_MAX)
        return 0;
    uint64_t fine_h = (uint64_t)height << code->vbits, fine_w = (uint64_t)width << code->hbits;
    if (fine_h == 0) return 1;
    return ((fine_h - 1) >> shift_y) < (uint64_t)out_h && ((fine_w - 1) >> shift_x) < (uint64_t)out_w;
}

static PyObject *failure(Py_ssize_t strip, int status) {
    if (status == EER_OK) Py_RETURN_NONE;
    return Py_BuildValue("(ni)", strip, status);
}

PyObject *vitrio_render(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, strips = {0}, out = {0}, gain = {0};
    PyObject *gain_object, *result = NULL;
    int kind, clear, rlebits, hbits, vbits, shift_y, shift_x, gain_shift_y, gain_shift_x;
    Py_ssize_t height, width, out_h, out_w, gain_h, gain_w;
    if (!PyArg_ParseTuple(args, "y*y*w*ip(nniii)(ii)(nn)O(nn)(ii):render", &data, &strips, &out, &kind, &clear,
                          &height, &width, &rlebits, &hbits, &vbits, &shift_y, &shift_x, &out_h, &out_w,
                          &gain_object, &gain_h, &gain_w, &gain_shift_y, &gain_shift_x))
        return NULL;
    Code code;
    int has_gain = gain_object != Py_None;
    if (has_gain && PyObject_GetBuffer(gain_object, &gain, PyBUF_C_CONTIGUOUS) < 0) goto done;
    if (check_layout(&data, &strips, height, width, rlebits, hbits, vbits, &code) < 0) goto done;
    if (kind < RENDER_U8 || kind > RENDER_F32 || (has_gain && kind != RENDER_F32)) {
        PyErr_SetString(PyExc_ValueError, "kind must be 0-3, and 3 (float32) with a gain");
        goto done;
    }
    if (!PyBuffer_IsContiguous(&out, 'C') || !covers(height, width, &code, shift_y, shift_x, out_h, out_w) ||
        (out_w > 0 && out_h > PY_SSIZE_T_MAX / out_w / kind_sizes[kind]) ||
        out.len < out_h * out_w * kind_sizes[kind]) {
        PyErr_SetString(PyExc_ValueError, "out is not a contiguous image large enough for the events");
        goto done;
    }
    if (has_gain && (!covers(height, width, &code, gain_shift_y, gain_shift_x, gain_h, gain_w) ||
                     (gain_w > 0 && gain_h > PY_SSIZE_T_MAX / gain_w / 4) ||
                     gain.len < gain_h * gain_w * 4)) {
        PyErr_SetString(PyExc_ValueError, "gain is not a float32 image large enough for the events");
        goto done;
    }
    Image image = {out.buf,           has_gain ? (const float *)gain.buf : NULL,
                   (uint32_t)out_w,   (uint32_t)gain_w,
                   (unsigned)shift_y, (unsigned)shift_x,
                   (unsigned)gain_shift_y, (unsigned)gain_shift_x};
    int by_pixel = (unsigned)shift_y == code.vbits && (unsigned)shift_x == code.hbits && out_w == width;
    ImageDecoder decoder = has_gain ? decode_gain : by_pixel ? pixel_decoders[kind] : fine_decoders[kind];
    const int64_t *rows = (const int64_t *)strips.buf;
    Py_ssize_t n = strips.len / 32, bad = -1;
    int status = EER_OK;
    Py_BEGIN_ALLOW_THREADS;
    if (clear) memset(out.buf, 0, (size_t)(out_h * out_w * kind_sizes[kind]));
    for (Py_ssize_t i = 0; i < n && status == EER_OK; i++) {
        const int64_t *s = rows + 4 * i;
        status = decoder((const uint8_t *)data.buf + s[0], (size_t)s[1], &code, (uint32_t)s[2], (uint32_t)s[3],
                         &image);
        bad = i;
    }
    Py_END_ALLOW_THREADS;
    result = failure(bad, status);
done:
    vitrio_release_views((Py_buffer *const[]){&data, &strips, &out, &gain, NULL});
    return result;
}

PyObject *vitrio_events(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, strips = {0}, positions = {0}, counts = {0};
    PyObject *result = NULL;
    int rlebits, hbits, vbits;
    Py_ssize_t height, width;
    if (!PyArg_ParseTuple(args, "y*y*w*w*(nniii):events", &data, &strips, &positions, &counts, &height, &width,
                          &rlebits, &hbits, &vbits))
        return NULL;
    Code code;
    if (check_layout(&data, &strips, height, width, rlebits, hbits, vbits, &code) < 0) goto done;
    Py_ssize_t n = strips.len / 32;
    if (counts.len < n * 8 || !PyBuffer_IsContiguous(&positions, 'C') || !PyBuffer_IsContiguous(&counts, 'C')) {
        PyErr_SetString(PyExc_ValueError, "positions or counts is not contiguous or too small");
        goto done;
    }
    Events sink = {(uint32_t *)positions.buf, 0, (size_t)positions.len / 8};
    int64_t *strip_counts = (int64_t *)counts.buf;
    const int64_t *rows = (const int64_t *)strips.buf;
    Py_ssize_t bad = -1;
    int status = EER_OK;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n && status == EER_OK; i++) {
        const int64_t *s = rows + 4 * i;
        size_t before = sink.count;
        status = decode_events((const uint8_t *)data.buf + s[0], (size_t)s[1], &code, (uint32_t)s[2],
                               (uint32_t)s[3], &sink);
        strip_counts[i] = (int64_t)(sink.count - before);
        bad = i;
    }
    Py_END_ALLOW_THREADS;
    result = failure(bad, status);
done:
    vitrio_release_views((Py_buffer *const[]){&data, &strips, &positions, &counts, NULL});
    return result;
}
