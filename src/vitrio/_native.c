/* vitrio._native: what has to run without the GIL or outside Python's reach.
 *
 * - EER decoding (render, events), below;
 * - a check of LZW streams before imagecodecs decodes them (lzw_check);
 * - file maps whose pages read as zeros instead of raising SIGBUS (map_file);
 * - the plain rows of the loops of STAR files (star_scan, star_fill), RELION's image names split
 *   (split_image_names) and locations made in bulk (new_locations), said where they are defined.
 *
 * Decoding of EER frames: run lengths of electron events and their sub-pixel positions.
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
 *
 * The numbers of the interface (kinds, statuses, the fields of rows) are the module's constants,
 * named as in this comment; vitrio/_native.pyi types the functions.
 *
 * The module also guards the TIFF reader (this is vitrio's one compiled module):
 *
 *   lzw_check(data, size)
 *     Walks the codes of a TIFF LZW segment as imagecodecs' decoder does when
 *     it decodes `size` bytes of it, and returns the offset of the byte that
 *     holds the first code after a CLEAR code when that code is not a literal
 *     (256 or more), or None. That decoder (imcd_lzw_decode, as of imagecodecs
 *     2026.3.6) takes such a code as a table entry without checking it, then
 *     reads entries it never made: a corrupt segment crashes it.
 *
 * And the memory maps the raw readers copy images out of:
 *
 *   map_file(fd, length, random=False) -> FileMap
 *     Maps the first `length` bytes of the open file `fd`, read only and shared, into an object
 *     that exposes them through the buffer protocol and is unmapped when the last reference to it
 *     (numpy views included) goes. Reading a page of a map that the file no longer holds (it was
 *     truncated) or that the system cannot read (an I/O error, on a network filesystem say) raises
 *     SIGBUS, whose default action kills the process. The handler of SIGBUS that map_file installs
 *     (at its first call, and again at a later one where another took SIGBUS since, as
 *     faulthandler.enable() does) maps a page of zeros in place of such a page instead, so that the copy
 *     goes on, and counts it in the map's `faults`, which readers check after they copy. A SIGBUS
 *     outside every map goes to the handler installed before. Up to 4096 maps are guarded at a
 *     time; more are mapped unguarded (`guarded` False). `random` tells the kernel the map is read
 *     at random (MADV_RANDOM): a page fault reads its page alone, not the read-around of the
 *     device's read-ahead (megabytes: on a cold stack, the first images read most of the file).
 *
 *   advise_map(map, ranges)
 *     Tells the kernel the ranges of a FileMap (int64 rows of offset and bytes) will be read soon
 *     (MADV_WILLNEED): what is not in the page cache is read while the copies wait for it.
 *
 * And batch reads of raw images, with no Python per image (the GIL released throughout):
 *
 *   Kinds of values: KIND_U8, KIND_I8, KIND_U16, KIND_I16, KIND_F16, KIND_F32, KIND_BYTES (copied as
 *   they are), KIND_BF16. A stored kind may carry SWAP: its values are of the other byte
 *   order. Conversions: any kind but bytes to float32, float16 or bfloat16 (as numpy and ml_dtypes
 *   cast, rounding to nearest even), and any kind to itself.
 *
 *   read_runs(paths, checks, runs, out, dst_kind, maps=None) -> None | (run, file, status, errno)
 *     `paths`: a tuple of file names (bytes); `checks`: int64 rows (CHECK_SIZE, CHECK_MTIME,
 *     CHECK_INODE, CHECK_DEVICE, CHECK_KIND: size, mtime_ns, inode, device, stored kind), one per
 *     file, what the file was when its layout was parsed; `runs`: int64 rows (RUN_FILE, RUN_OFFSET,
 *     RUN_COUNT, RUN_DESTINATION), each `count` values at byte `offset` of the file, to
 *     land converted at byte `destination` of `out`. Runs of one file follow one another; each
 *     file is opened once, checked against its row, read with pread, and closed. Returns None,
 *     or the first run that failed: status READ_OPEN the file did not open (errno), READ_CHANGED it
 *     is not what its check row says (changed since), READ_ERROR a read failed (errno), READ_SHORT
 *     the file ended first.
 *     Runs before it are read. `maps`, a tuple of a buffer or None per file, gives files that
 *     are mapped already (the FileMap of an open reader): such a file is checked with stat
 *     rather than opened, and its runs are copied out of the map; a run that does not lie in
 *     the map fails with status READ_CHANGED.
 *
 *   advise(paths, checks, runs)
 *     Tells the kernel the runs (as read_runs takes them) will be read soon (posix_fadvise
 *     WILLNEED), so that the disk reads them while earlier batches are copied. Files that do not
 *     open are passed over.
 *
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
/* The stable ABI of CPython 3.11: one build serves every CPython from 3.11 on (setup.py tags it abi3). */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { EER_OK = 0, EER_TRUNCATED = 1, EER_PAST_END = 2, EER_FULL = 3 };
enum { RENDER_U8, RENDER_U16, RENDER_U32, RENDER_F32 }; /* the kinds of render's out */

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

/* Releases the views of a NULL-ended list; one never taken (all zeros) is passed over. */
static void release_views(Py_buffer *const *views) {
    for (; *views != NULL; views++) PyBuffer_Release(*views);
}

static PyObject *failure(Py_ssize_t strip, int status) {
    if (status == EER_OK) Py_RETURN_NONE;
    return Py_BuildValue("(ni)", strip, status);
}

static PyObject *render(PyObject *self, PyObject *args) {
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
    release_views((Py_buffer *const[]){&data, &strips, &out, &gain, NULL});
    return result;
}

static PyObject *events(PyObject *self, PyObject *args) {
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
    release_views((Py_buffer *const[]){&data, &strips, &positions, &counts, NULL});
    return result;
}

enum { LZW_CLEAR = 256, LZW_EOI = 257, LZW_FIRST = 258, LZW_TABLE = 5120 };

/* The next code of `width` bits at bit `*at`, read exactly as imagecodecs' decoder reads it (most or
 * least significant bit first; a third byte only while 24 bits from `*at` lie in the stream). */
static inline uint32_t lzw_next(const uint8_t *src, uint64_t nbits, uint64_t *at, unsigned width, int msb) {
    if (*at + width > nbits) return LZW_EOI;
    const uint8_t *bytes = src + (*at >> 3);
    uint32_t third = *at + 24 <= nbits ? bytes[2] : 0, offset = (uint32_t)(*at & 7), code;
    if (msb)
        code = ((((uint32_t)bytes[0] << 16) | ((uint32_t)bytes[1] << 8) | third) >> (24 - offset - width));
    else
        code = ((third << 16) | ((uint32_t)bytes[1] << 8) | bytes[0]) >> offset;
    *at += width;
    return code & ((1u << width) - 1);
}

/* The offset of the byte holding the first code after a CLEAR that is not a literal, or -1. */
static Py_ssize_t lzw_scan(const uint8_t *src, Py_ssize_t size, Py_ssize_t remaining) {
    if (size < 2 || remaining <= 0) return -1;
    int msb = !(src[0] == 0 && (src[1] & 1));
    if (msb && (src[0] != 128 || (src[1] & 128))) return -1; /* refused by the decoder */
    uint32_t lengths[LZW_TABLE];
    for (int i = 0; i < LZW_FIRST; i++) lengths[i] = 1;
    const uint64_t nbits = (uint64_t)size * 8;
    uint64_t at = 0;
    unsigned width = 9;
    uint32_t table = LZW_FIRST, old = 0;
    while (remaining > 0) {
        uint32_t code = lzw_next(src, nbits, &at, width, msb);
        if (code == LZW_EOI) break;
        if (code == LZW_CLEAR) {
            table = LZW_FIRST;
            width = 9;
            do code = lzw_next(src, nbits, &at, width, msb);
            while (code == LZW_CLEAR);
            if (code == LZW_EOI) break;
            if (code >= LZW_CLEAR) return (Py_ssize_t)((at - width) >> 3);
            remaining--;
            old = code;
            continue;
        }
        if (table >= LZW_TABLE || code > table) break; /* the decoder stops with an error */
        uint32_t length = lengths[code < table ? code : old];
        remaining -= (Py_ssize_t)length < remaining ? (Py_ssize_t)length : remaining;
        if (code == table && --remaining < 0) break;
        lengths[table++] = lengths[old] + 1;
        old = code;
        if (table == (msb ? 511u : 512u) || table == (msb ? 1023u : 1024u) || table == (msb ? 2047u : 2048u))
            width++;
    }
    return -1;
}

static PyObject *lzw_check(PyObject *self, PyObject *args) {
    Py_buffer data = {0};
    Py_ssize_t size, bad;
    if (!PyArg_ParseTuple(args, "y*n:lzw_check", &data, &size)) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    bad = lzw_scan((const uint8_t *)data.buf, data.len, size);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&data);
    if (bad < 0) Py_RETURN_NONE;
    return PyLong_FromSsize_t(bad);
}

/* A guarded map: its pages, and how many of them read as zeros. `start` is 0 while the slot is free;
 * it is set last when a map is guarded and cleared first when it is unmapped, so that the handler
 * sees a whole range or none. Slots change only under the GIL; the handler reads them from any
 * thread. */
typedef struct {
    atomic_uintptr_t start, end;
    atomic_ullong faults;
} Guard;

enum { GUARDS = 4096 };
static Guard guards[GUARDS];
static size_t next_guard, page_size;
static struct sigaction previous_bus;

static void on_bus_error(int signum, siginfo_t *info, void *context) {
    uintptr_t address = (uintptr_t)info->si_addr;
    if (info->si_code > 0) { /* raised by a fault, not sent */
        for (size_t i = 0; i < GUARDS; i++) {
            uintptr_t start = atomic_load(&guards[i].start);
            if (start == 0 || address < start || address >= atomic_load(&guards[i].end) ||
                atomic_load(&guards[i].start) != start)
                continue;
            void *page = (void *)(address & ~(uintptr_t)(page_size - 1));
            if (mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == page) {
                atomic_fetch_add(&guards[i].faults, 1);
                return;
            }
            break;
        }
    }
    if (previous_bus.sa_flags & SA_SIGINFO) {
        previous_bus.sa_sigaction(signum, info, context);
    } else if (previous_bus.sa_handler == SIG_DFL || previous_bus.sa_handler == SIG_IGN) {
        /* the fault happens again on return, or the signal is sent again, to the default action */
        sigaction(SIGBUS, &previous_bus, NULL);
        if (info->si_code <= 0) raise(signum);
    } else {
        previous_bus.sa_handler(signum);
    }
}

typedef struct {
    PyObject_HEAD
    void *address;
    Py_ssize_t length;
    Guard *guard;
    PyObject *weakrefs;
} FileMap;

static int filemap_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    FileMap *map = (FileMap *)self;
    return PyBuffer_FillInfo(view, self, map->address, map->length, 1, flags);
}

static void filemap_dealloc(PyObject *self) {
    FileMap *map = (FileMap *)self;
    if (map->weakrefs) PyObject_ClearWeakRefs(self);
    if (map->guard) {
        atomic_store(&map->guard->start, 0);
        atomic_store(&map->guard->end, 0);
    }
    munmap(map->address, (size_t)map->length);
    PyTypeObject *type = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DECREF(type);
}

static PyObject *filemap_faults(PyObject *self, void *closure) {
    Guard *guard = ((FileMap *)self)->guard;
    return PyLong_FromUnsignedLongLong(guard ? atomic_load(&guard->faults) : 0);
}

static PyObject *filemap_guarded(PyObject *self, void *closure) {
    return PyBool_FromLong(((FileMap *)self)->guard != NULL);
}

static PyGetSetDef filemap_getset[] = {
    {"faults", filemap_faults, NULL, "How many pages could not be read and read as zeros instead.", NULL},
    {"guarded", filemap_guarded, NULL, "Whether a page that cannot be read reads as zeros.", NULL},
    {NULL},
};

static PyMemberDef filemap_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(FileMap, weakrefs), READONLY, NULL},
    {NULL},
};

/* A type made from a spec at import, as the stable ABI has types made (its PyTypeObject is opaque). */
static PyType_Slot filemap_slots[] = {
    {Py_tp_dealloc, filemap_dealloc},
    {Py_bf_getbuffer, filemap_getbuffer},
    {Py_tp_doc, "A read-only map of the start of a file, whose pages that cannot be read read as zeros."},
    {Py_tp_getset, filemap_getset},
    {Py_tp_members, filemap_members},
    {0, NULL},
};

static PyType_Spec filemap_spec = {
    .name = "vitrio._native.FileMap",
    .basicsize = sizeof(FileMap),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = filemap_slots,
};

static PyTypeObject *FileMapType;

/* A free slot guarding `length` bytes at `address`, or NULL when every slot is taken. */
static Guard *guard(void *address, Py_ssize_t length) {
    for (size_t n = 0; n < GUARDS; n++) {
        Guard *slot = &guards[(next_guard + n) % GUARDS];
        if (atomic_load(&slot->start) == 0) {
            next_guard = (next_guard + n + 1) % GUARDS;
            atomic_store(&slot->faults, 0);
            atomic_store(&slot->end, (uintptr_t)address + (uintptr_t)length);
            atomic_store(&slot->start, (uintptr_t)address);
            return slot;
        }
    }
    return NULL;
}

static PyObject *map_file(PyObject *self, PyObject *args) {
    int fd, random = 0;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "in|p:map_file", &fd, &length, &random)) return NULL;
    if (length < 1) {
        PyErr_SetString(PyExc_ValueError, "a map holds at least one byte");
        return NULL;
    }
    struct sigaction current;
    if (sigaction(SIGBUS, NULL, &current) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (!(current.sa_flags & SA_SIGINFO) || current.sa_sigaction != on_bus_error) {
        /* first, or a handler installed since (faulthandler.enable, say) took SIGBUS: take it back,
           handing it what we do not handle */
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = on_bus_error;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        if (sigaction(SIGBUS, &action, &previous_bus) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    }
    void *address = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, fd, 0);
    if (address == MAP_FAILED) return PyErr_SetFromErrno(PyExc_OSError);
    if (random) madvise(address, (size_t)length, MADV_RANDOM); /* a hint: the map works without it */
    FileMap *map = PyObject_New(FileMap, FileMapType);
    if (map == NULL) {
        munmap(address, (size_t)length);
        return NULL;
    }
    map->address = address;
    map->length = length;
    map->guard = guard(address, length);
    map->weakrefs = NULL;
    return (PyObject *)map;
}

/* ---------------------------------------------------------------- batch reads of raw images */

enum { K_U8, K_I8, K_U16, K_I16, K_F16, K_F32, K_BYTES, K_BF16, KINDS, SWAP = 256 };
static const size_t kind_size[KINDS] = {1, 1, 2, 2, 2, 4, 1, 2};
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
 * chosen at run time. */
#define TO_F32_LOOP(NAME, TYPE, ATTRIBUTES)                                                 \
    ATTRIBUTES static void NAME(const void *restrict src, float *restrict dst, size_t n) { \
        const TYPE *s = (const TYPE *)src;                                                 \
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];                               \
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
    const uint16_t *s = (const uint16_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint32_t h = s[i], o = (h & 0x7fffu) << 13, exponent = o & (0x7c00u << 13);
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
        dst[i] = o | (uint16_t)(sign >> 16);
    }
}

#ifdef X86
__attribute__((target("avx,f16c"))) static void f16_f32_f16c(const void *restrict src, float *restrict dst,
                                                             size_t n) {
    const uint16_t *s = (const uint16_t *)src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    f16_f32_portable(s + i, dst + i, n - i);
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
    const uint16_t *s = (const uint16_t *)src;
    uint32_t *d = (uint32_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
}

/* float32 to bfloat16, rounding to nearest even as ml_dtypes does; NaN stays NaN (made quiet). */
VECTORIZE static void f32_bf16(const float *restrict src, uint16_t *restrict dst, size_t n) {
    const uint32_t *s = (const uint32_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = s[i];
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
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
    int kind = src_kind & ~SWAP, swap = (src_kind & SWAP) && kind_size[kind] > 1;
    size_t size = kind_size[kind];
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
        uint8_t *to = (uint8_t *)dst + done * kind_size[dst_kind];
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

/* Large destinations are written with non-temporal stores (x86): a batch of megabytes that the caller
 * reads later gains nothing from passing through the cache, and the stores skip reading each line
 * of the destination before writing it. */
enum { STREAM_MIN_BYTES = 4 << 20, STREAM_BLOCK = 8192 };

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
    size_t in_size = kind_size[src_kind & ~SWAP], out_size = kind_size[dst_kind];
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

/* convert_values, streaming into `dst` when `stream` (and the processor can); end with stream_fence. */
static void convert_into(int src_kind, int dst_kind, const void *src, void *dst, size_t n, int stream) {
#ifdef X86
    if (stream && streaming) return convert_streaming(src_kind, dst_kind, src, dst, n);
#endif
    (void)stream;
    convert_values(src_kind, dst_kind, src, dst, n);
}

/* Orders the non-temporal stores before what follows (another thread reading the destination). */
static void stream_fence(void) {
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

static int bad_kinds(long src_kind, long dst_kind) {
    if (convertible(src_kind, dst_kind)) return 0;
    PyErr_Format(PyExc_ValueError, "no conversion from kind %ld to kind %ld", src_kind, dst_kind);
    return 1;
}

static PyObject *convert(PyObject *self, PyObject *args) {
    Py_buffer src = {0}, out = {0};
    long src_kind, dst_kind;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*lw*l:convert", &src, &src_kind, &out, &dst_kind)) return NULL;
    if (bad_kinds(src_kind, dst_kind)) goto done;
    size_t n = (size_t)src.len / kind_size[src_kind & ~SWAP];
    if ((size_t)src.len % kind_size[src_kind & ~SWAP] || (size_t)out.len < n * kind_size[dst_kind]) {
        PyErr_SetString(PyExc_ValueError, "src is not whole values, or out is too small for them");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    convert_values((int)src_kind, (int)dst_kind, src.buf, out.buf, n);
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    release_views((Py_buffer *const[]){&src, &out, NULL});
    return result;
}

enum { READ_OK = 0, READ_OPEN = 1, READ_CHANGED = 2, READ_ERROR = 3, READ_SHORT = 4 };
/* The fields of a row of runs, and of a check row. */
enum { RUN_FILE, RUN_OFFSET, RUN_COUNT, RUN_DESTINATION, RUN_FIELDS };
enum { CHECK_SIZE, CHECK_MTIME, CHECK_INODE, CHECK_DEVICE, CHECK_KIND, CHECK_FIELDS };
enum { BUFFER_BYTES = 1 << 18 };
static pthread_key_t buffer_key;

/* This thread's buffer of BUFFER_BYTES for values read before they are converted, or NULL. */
static uint8_t *thread_buffer(void) {
    uint8_t *buffer = pthread_getspecific(buffer_key);
    if (buffer == NULL) {
        void *memory = NULL;
        if (posix_memalign(&memory, 64, BUFFER_BYTES)) return NULL;
        if (pthread_setspecific(buffer_key, memory)) {
            free(memory);
            return NULL;
        }
        buffer = memory;
    }
    return buffer;
}

/* Reads `length` bytes at `offset` of fd into dst: READ_OK, READ_ERROR (errno set) or READ_SHORT. */
static int read_fully(int fd, uint8_t *dst, size_t length, int64_t offset) {
    while (length) {
        ssize_t got = pread(fd, dst, length, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return READ_ERROR;
        }
        if (got == 0) return READ_SHORT;
        dst += got, length -= (size_t)got, offset += got;
    }
    return READ_OK;
}

/* Checks the paths, the check rows and the runs (rows of 4 int64, files in range, offsets and counts
 * not negative, each run's bytes within the size its file had and, with dst_kind >= 0, its
 * destination within out_len). Sets *names to the paths' texts, for the loops that run without the GIL
 * (the stable ABI reads a tuple and bytes through calls, which need it); PyMem_Free them. */
static int check_runs(PyObject *paths, const Py_buffer *checks, const Py_buffer *runs, Py_ssize_t out_len,
                      long dst_kind, Py_ssize_t *files, const char ***names) {
    if (!PyTuple_Check(paths)) {
        PyErr_SetString(PyExc_TypeError, "paths is a tuple of bytes");
        return -1;
    }
    Py_ssize_t n_files = PyTuple_Size(paths);
    for (Py_ssize_t i = 0; i < n_files; i++) {
        if (!PyBytes_Check(PyTuple_GetItem(paths, i))) {
            PyErr_SetString(PyExc_TypeError, "paths is a tuple of bytes");
            return -1;
        }
    }
    if (runs->len % (RUN_FIELDS * 8) || checks->len != n_files * CHECK_FIELDS * 8) {
        PyErr_SetString(PyExc_ValueError, "runs are int64 rows of 4, checks int64 rows of 5, one per path");
        return -1;
    }
    const int64_t *check = (const int64_t *)checks->buf;
    for (Py_ssize_t i = 0; i < n_files; i++)
        if (bad_kinds((long)check[CHECK_FIELDS * i + CHECK_KIND], dst_kind < 0 ? K_F32 : dst_kind)) return -1;
    const int64_t *run = (const int64_t *)runs->buf;
    for (Py_ssize_t i = 0; i < runs->len / (RUN_FIELDS * 8); i++, run += RUN_FIELDS) {
        int64_t file = run[RUN_FILE], offset = run[RUN_OFFSET], count = run[RUN_COUNT], at = run[RUN_DESTINATION];
        int ok = file >= 0 && file < n_files && offset >= 0 && count >= 0 && at >= 0 && count <= (INT64_MAX >> 3);
        if (ok) {
            const int64_t *c = check + CHECK_FIELDS * file;
            int64_t bytes = count * (int64_t)kind_size[c[CHECK_KIND] & ~SWAP];
            ok = offset <= c[CHECK_SIZE] && bytes <= c[CHECK_SIZE] - offset;
            if (dst_kind >= 0)
                ok = ok && at <= out_len && count * (int64_t)kind_size[dst_kind] <= out_len - at;
        }
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "run %zd lies outside its file or the destination", i);
            return -1;
        }
    }
    *names = PyMem_Calloc((size_t)n_files + 1, sizeof(char *));
    if (*names == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_files; i++) (*names)[i] = PyBytes_AsString(PyTuple_GetItem(paths, i));
    *files = n_files;
    return 0;
}

/* Reads one run of file `fd` stored as `src_kind` into dst as dst_kind. */
static int read_run(int fd, int64_t offset, int64_t count, int src_kind, int dst_kind, uint8_t *dst,
                    int stream) {
    size_t size = kind_size[src_kind & ~SWAP];
    if (src_kind == dst_kind) return read_fully(fd, dst, (size_t)count * size, offset);
    uint8_t *buffer = thread_buffer();
    if (buffer == NULL) {
        errno = ENOMEM;
        return READ_ERROR;
    }
    size_t per_chunk = BUFFER_BYTES / size;
    while (count > 0) {
        size_t m = (size_t)count < per_chunk ? (size_t)count : per_chunk;
        int status = read_fully(fd, buffer, m * size, offset);
        if (status) return status;
        convert_into(src_kind, dst_kind, buffer, dst, m, stream);
        offset += (int64_t)(m * size), count -= (int64_t)m, dst += m * kind_size[dst_kind];
    }
    return READ_OK;
}

/* Opens a file known by its layout without waiting: a FIFO or device put at its path since is
   refused by `same_file`, and its reader names it. */
static int open_file(const char *path) {
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* Whether the file `st` describes is the one a check row (size, mtime_ns, inode, device) describes. */
static int same_file(const struct stat *st, const int64_t *c) {
    return S_ISREG(st->st_mode) && (int64_t)st->st_size == c[CHECK_SIZE] &&
           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == c[CHECK_MTIME] &&
           (int64_t)st->st_ino == c[CHECK_INODE] &&
           (int64_t)st->st_dev == c[CHECK_DEVICE];
}

/* Copies one run out of the map of its file (`map`, `length` bytes) into dst, converting. */
static int copy_run(const uint8_t *map, Py_ssize_t length, int64_t offset, int64_t count, int src_kind,
                    int dst_kind, uint8_t *dst, int stream) {
    if (offset > length || count * (int64_t)kind_size[src_kind & ~SWAP] > length - offset) return READ_CHANGED;
    convert_into(src_kind, dst_kind, map + offset, dst, (size_t)count, stream);
    return READ_OK;
}

static PyObject *read_runs(PyObject *self, PyObject *args) {
    PyObject *paths, *maps = Py_None, *result = NULL;
    Py_buffer checks = {0}, runs = {0}, out = {0};
    Py_buffer *views = NULL;
    const char **names = NULL;
    long dst_kind;
    Py_ssize_t n_files = 0, mapped = 0;
    if (!PyArg_ParseTuple(args, "O!y*y*w*l|O:read_runs", &PyTuple_Type, &paths, &checks, &runs, &out, &dst_kind,
                          &maps))
        return NULL;
    if (dst_kind < 0 || dst_kind >= KINDS) {
        PyErr_SetString(PyExc_ValueError, "dst_kind is not a kind");
        goto done;
    }
    if (check_runs(paths, &checks, &runs, out.len, dst_kind, &n_files, &names) < 0) goto done;
    if (maps != Py_None && (!PyTuple_Check(maps) || PyTuple_Size(maps) != n_files)) {
        PyErr_SetString(PyExc_ValueError, "maps is a tuple of a buffer or None per path");
        goto done;
    }
    views = PyMem_Calloc((size_t)n_files + 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; maps != Py_None && mapped < n_files; mapped++) {
        PyObject *map = PyTuple_GetItem(maps, mapped);
        if (map != Py_None && PyObject_GetBuffer(map, &views[mapped], PyBUF_SIMPLE) < 0) goto done;
    }
    const int64_t *run = (const int64_t *)runs.buf, *check = (const int64_t *)checks.buf;
    Py_ssize_t n = runs.len / (RUN_FIELDS * 8), i = 0;
    int64_t file = -1;
    int fd = -1, status = READ_OK, error = 0, stream = out.len >= STREAM_MIN_BYTES;
    Py_BEGIN_ALLOW_THREADS;
    for (; i < n; i++) {
        const int64_t *r = run + RUN_FIELDS * i;
        const Py_buffer *view = &views[r[RUN_FILE]];
        int kind = (int)check[CHECK_FIELDS * r[RUN_FILE] + CHECK_KIND];
        if (r[RUN_FILE] != file) {
            if (fd >= 0) close(fd);
            fd = -1;
            file = r[RUN_FILE];
            const char *path = names[file];
            struct stat st;
            int found;
            if (view->buf != NULL) {
                found = stat(path, &st) == 0;
            } else {
                fd = open_file(path);
                if (fd < 0) {
                    status = READ_OPEN;
                    break;
                }
                found = fstat(fd, &st) == 0;
            }
            if (!found || !same_file(&st, check + CHECK_FIELDS * file)) {
                status = READ_CHANGED;
                break;
            }
        }
        uint8_t *dst = (uint8_t *)out.buf + r[RUN_DESTINATION];
        if (view->buf != NULL)
            status = copy_run(view->buf, view->len, r[RUN_OFFSET], r[RUN_COUNT], kind, (int)dst_kind, dst, stream);
        else
            status = read_run(fd, r[RUN_OFFSET], r[RUN_COUNT], kind, (int)dst_kind, dst, stream);
        if (status) break;
    }
    error = errno;
    if (fd >= 0) close(fd);
    if (stream) stream_fence();
    Py_END_ALLOW_THREADS;
    if (status == READ_OK)
        result = Py_NewRef(Py_None);
    else
        result = Py_BuildValue("(nLii)", i, (long long)file, status,
                               status == READ_OPEN || status == READ_ERROR ? error : 0);
done:
    for (Py_ssize_t j = 0; views != NULL && j < mapped; j++)
        if (views[j].obj != NULL) PyBuffer_Release(&views[j]);
    PyMem_Free(views);
    PyMem_Free(names);
    release_views((Py_buffer *const[]){&checks, &runs, &out, NULL});
    return result;
}

static PyObject *advise(PyObject *self, PyObject *args) {
    PyObject *paths;
    Py_buffer checks = {0}, runs = {0};
    Py_ssize_t n_files;
    const char **names;
    if (!PyArg_ParseTuple(args, "O!y*y*:advise", &PyTuple_Type, &paths, &checks, &runs)) return NULL;
    if (check_runs(paths, &checks, &runs, 0, -1, &n_files, &names) < 0) {
        release_views((Py_buffer *const[]){&checks, &runs, NULL});
        return NULL;
    }
    const int64_t *run = (const int64_t *)runs.buf, *check = (const int64_t *)checks.buf;
    Py_ssize_t n = runs.len / (RUN_FIELDS * 8);
    Py_BEGIN_ALLOW_THREADS;
    int64_t file = -1;
    int fd = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = run + RUN_FIELDS * i;
        if (r[RUN_FILE] != file) {
            if (fd >= 0) close(fd);
            file = r[RUN_FILE];
            fd = open_file(names[file]);
        }
        int kind = (int)check[CHECK_FIELDS * r[RUN_FILE] + CHECK_KIND];
        off_t bytes = (off_t)(r[RUN_COUNT] * (int64_t)kind_size[kind & ~SWAP]);
        if (fd >= 0) posix_fadvise(fd, (off_t)r[RUN_OFFSET], bytes, POSIX_FADV_WILLNEED);
    }
    if (fd >= 0) close(fd);
    Py_END_ALLOW_THREADS;
    PyMem_Free(names);
    release_views((Py_buffer *const[]){&checks, &runs, NULL});
    Py_RETURN_NONE;
}

static PyObject *advise_map(PyObject *self, PyObject *args) {
    PyObject *map;
    Py_buffer ranges = {0};
    if (!PyArg_ParseTuple(args, "O!y*:advise_map", FileMapType, &map, &ranges)) return NULL;
    const int64_t *range = (const int64_t *)ranges.buf;
    Py_ssize_t n = ranges.len / 16;
    int ok = ranges.len % 16 == 0;
    uint8_t *address = ((FileMap *)map)->address;
    int64_t length = ((FileMap *)map)->length;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = range[2 * i] >= 0 && range[2 * i + 1] >= 0 && range[2 * i] <= length &&
             range[2 * i + 1] <= length - range[2 * i];
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "ranges are int64 rows (offset, bytes) within the map");
        release_views((Py_buffer *const[]){&ranges, NULL});
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        uintptr_t start = (uintptr_t)(address + range[2 * i]), end = start + (uintptr_t)range[2 * i + 1];
        start &= ~(uintptr_t)(page_size - 1);
        if (end > start) madvise((void *)start, (size_t)(end - start), MADV_WILLNEED);
    }
    Py_END_ALLOW_THREADS;
    release_views((Py_buffer *const[]){&ranges, NULL});
    Py_RETURN_NONE;
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

static PyObject *crop(PyObject *self, PyObject *args) {
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
    if (bad_kinds(src_kind, dst_kind)) goto done;
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
    size_t in_size = kind_size[src_kind & ~SWAP], out_size = kind_size[dst_kind];
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
    release_views((Py_buffer *const[]){&src, &origins, &slots, &out, &fill, NULL});
    return result;
}

/* simd(enabled): whether conversions use the processor's vector extensions (F16C, AVX2) where it has
 * them; False runs the portable loops, for tests. Returns whether they were in use. */
static PyObject *simd(PyObject *self, PyObject *args) {
    int enabled, was = streaming;
    if (!PyArg_ParseTuple(args, "p:simd", &enabled)) return NULL;
    has_f16c = enabled && cpu_f16c;
    has_avx2 = enabled && cpu_avx2;
    streaming = enabled;
    return PyBool_FromLong(was);
}

/* ---- The rows of a loop of a STAR file ----
 *
 * Plain rows are read here, what the general parser (vitrio/data/_star_text.py, pandas' C parser
 * over chunks of the text) would make of them, value for value: printable ASCII split at spaces and
 * tabs, `#` starting a comment, LF or CRLF line ends, no quotes. The loop ends before the first line
 * that starts (after spaces and tabs) with `data_`, or at the end of the text. Anything else (another
 * byte, a row of more or fewer values than the loop has columns, a column whose values pandas would
 * take in a way this does not: booleans, infinities, text among numbers, NaN among text) is left to
 * the general parser, which also says what is wrong. Both functions release the GIL while they run;
 * star_fill writes the rows from `half` on in a thread of its own.
 *
 *   star_scan(text, start, columns) -> None | (end, rows, lines, kinds, sizes, half)
 *     Reads the rows from byte `start` of `text`: the loop ends at byte `end`, after `lines` line
 *     ends, and holds `rows` rows. `kinds` has a byte per column: b'i' integers (int64), b'f' numbers
 *     (float64; "nan", "NaN" and "<NA>" are NaN), b't' text; `sizes`, the bytes of each column's
 *     values. `half`, (offset, rows, sizes): the first line at or past the middle of the text from
 *     `start` (or `end`), the rows before it and the sizes of their values, where a second thread
 *     starts writing. None if the rows are not plain, or there are none.
 *
 *   star_fill(text, start, end, kinds, outs, half)
 *     Writes the values of the rows star_scan read into `outs`, one per column: an int64 or float64
 *     array of a value per row for b'i' and b'f', a pair (offsets, data) for b't', the Arrow layout
 *     of a string array (offsets int64, rows + 1 of them; data, the values one after another).
 *     Numbers are converted as pandas converts them: to the nearest double. Raises ValueError if the
 *     rows are not what `kinds` says or do not fit `outs`.
 */

enum { STAR_INT = 1, STAR_FLOAT = 2, STAR_NA = 4, STAR_TEXT = 8, STAR_OTHER = 16 };
#define STAR_THREAD_BYTES (1 << 20) /* a half of rows at least this long is written by a thread of its own */
#define STAR_MAX_COLUMNS 65536

/* What each byte is to the rows: a byte of a value has SB_VALUE and the bits of its kind of character
 * (a value's bits together say what it can be); the others are separators, or 0 (not plain). */
enum {
    SB_VALUE = 1,  /* printable ASCII but quotes and '#' */
    SB_DIGIT = 2,
    SB_POINT = 4,
    SB_EXP = 8,    /* e, E */
    SB_SIGN = 16,  /* +, - */
    SB_WORDY = 32, /* what numbers in other spellings are made of: inf, Infinity, nan, 1_000 */
    SB_TEXT = 64,  /* what no spelling of a number has */
    SB_SPACE = 128,
    SB_LINE = 256,
    SB_CR = 512,
    SB_HASH = 1024,
};

static uint16_t star_bytes[256];
static locale_t star_locale; /* "C": numbers read the same whatever the process's locale */

static int star_init(void) {
    for (int c = '!'; c <= '~'; c++)
        star_bytes[c] = SB_VALUE | (c >= '0' && c <= '9' ? SB_DIGIT
                                    : c == '.'             ? SB_POINT
                                    : c == 'e' || c == 'E' ? SB_EXP
                                    : c == '+' || c == '-' ? SB_SIGN
                                    : strchr("iInNfFaAtTyY_", c) ? SB_WORDY
                                                                 : SB_TEXT);
    star_bytes['"'] = star_bytes['\''] = 0;
    star_bytes['#'] = SB_HASH;
    star_bytes[' '] = star_bytes['\t'] = SB_SPACE;
    star_bytes['\n'] = SB_LINE;
    star_bytes['\r'] = SB_CR;
    star_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    return star_locale != (locale_t)0;
}

static inline int star_digit(uint8_t c) { return c >= '0' && c <= '9'; }

typedef struct {
    const uint8_t *start;
    size_t length;
    unsigned bits; /* of its bytes, together */
} StarValue;

/* The next value of the line at *at: 1 and the value, or 0 at the line's end (*at then past its line
 * end, or at `end`), or -1 where the text is not plain. */
static inline int star_value(const uint8_t **at, const uint8_t *end, StarValue *value) {
    const uint8_t *p = *at;
    while (p < end) {
        unsigned b = star_bytes[*p];
        if (b & SB_VALUE) {
            const uint8_t *start = p;
            unsigned all = 0;
            do all |= b, p++;
            while (p < end && ((b = star_bytes[*p]) & SB_VALUE));
            if (p < end && !(b & (SB_SPACE | SB_LINE | SB_CR | SB_HASH))) return -1;
            *value = (StarValue){start, (size_t)(p - start), all};
            *at = p;
            return 1;
        }
        if (b & SB_SPACE) {
            p++;
        } else if (b & SB_LINE) {
            p++;
            break;
        } else if (b & SB_CR && p + 1 < end && p[1] == '\n') {
            p += 2;
            break;
        } else if (b & SB_HASH) {
            for (p++; p < end && *p != '\n'; p++) {
                b = star_bytes[*p];
                if (!(b & (SB_VALUE | SB_SPACE | SB_HASH)) && !(b & SB_CR && p + 1 < end && p[1] == '\n')) return -1;
            }
        } else {
            return -1;
        }
    }
    *at = p;
    return 0;
}

/* Whether the line at p starts a block: `data_` after spaces and tabs. */
static inline int star_block(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return end - p >= 5 && memcmp(p, "data_", 5) == 0;
}

/* What a value may be: STAR_NA, STAR_INT (of at most 18 bytes,
 * which int64 holds), STAR_FLOAT, STAR_TEXT (a number in no spelling), or STAR_OTHER (left to the general
 * parser: booleans, infinities, NaN in another spelling). Numbers are told by their bytes alone:
 * star_fill checks them whole, and refuses what is not. */
static inline int star_class(const StarValue *value) {
    const uint8_t *s = value->start;
    size_t n = value->length;
    unsigned bits = value->bits;
    if (bits & SB_TEXT) {
        if (n == 4 && !memcmp(s, "<NA>", 4)) return STAR_NA;
        if ((n == 4 || n == 5) && strchr("TtFf", s[0]) &&
            (!memcmp(s, "True", n) || !memcmp(s, "TRUE", n) || !memcmp(s, "true", n) || !memcmp(s, "False", n) ||
             !memcmp(s, "FALSE", n) || !memcmp(s, "false", n)))
            return STAR_OTHER;
        return STAR_TEXT;
    }
    if (!(bits & SB_DIGIT) || bits & SB_WORDY)
        return n == 3 && (!memcmp(s, "nan", 3) || !memcmp(s, "NaN", 3)) ? STAR_NA : STAR_OTHER;
    if (!(bits & (SB_POINT | SB_EXP))) return n <= 18 ? STAR_INT : STAR_OTHER;
    return STAR_FLOAT;
}

/* The powers of ten a double holds exactly. */
static const double star_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number as pandas' C parser converts it: the double nearest to its decimal value (±inf past the
 * largest, 0 below the smallest). Of up to 15 digits and a power of ten up to 22, the digits as an
 * integer times or divided by that power, each exact, rounded once; else strtod in the C locale.
 * Returns 0 if the value is not a number of the spelling [+-]digits[.digits][e[+-]digits]. */
static int star_number(const uint8_t *s, size_t n, double *out) {
    const uint8_t *p = s, *e = s + n;
    int negative = 0, digits = 0, decimals = 0, exponent = 0, exponent_digits = 0, minus = 0;
    uint64_t sum = 0;
    if (p < e && (*p == '+' || *p == '-')) negative = *p++ == '-';
    for (; p < e && star_digit(*p); p++, digits++) sum = sum * 10 + (uint64_t)(*p - '0');
    if (p < e && *p == '.')
        for (p++; p < e && star_digit(*p); p++, digits++, decimals++) sum = sum * 10 + (uint64_t)(*p - '0');
    if (digits == 0) return 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) minus = *p++ == '-';
        for (; p < e && star_digit(*p); p++, exponent_digits++)
            if (exponent_digits < 6) exponent = exponent * 10 + (*p - '0');
        if (exponent_digits == 0) return 0;
    }
    if (p != e) return 0;
    int scale = (minus ? -exponent : exponent) - decimals;
    if (digits <= 15 && exponent_digits <= 5 && scale >= -22 && scale <= 22) {
        double number = (double)sum;
        number = scale >= 0 ? number * star_exact[scale] : number / star_exact[-scale];
        *out = negative ? -number : number;
        return 1;
    }
    char text[128];
    if (n >= sizeof text) return 0;
    memcpy(text, s, n);
    text[n] = 0;
    char *end;
    *out = strtod_l(text, &end, star_locale);
    return end == text + n;
}

/* A tuple of the sizes. */
static PyObject *star_sizes(const uint64_t *sizes, Py_ssize_t columns) {
    PyObject *sized = PyTuple_New(columns);
    for (Py_ssize_t c = 0; sized != NULL && c < columns; c++) {
        PyObject *size = PyLong_FromUnsignedLongLong(sizes[c]);
        if (size == NULL || PyTuple_SetItem(sized, c, size) < 0) Py_CLEAR(sized);
    }
    return sized;
}

/* Rows of a loop scanned by one thread: from p up to `end` (a line start, or the end of the text), or
 * to the line that starts a block (`block`), or to what is not plain. */
typedef struct {
    const uint8_t *p, *end;
    Py_ssize_t columns, rows, lines;
    uint8_t *masks;
    uint64_t *sizes;
    int plain, block;
} StarScan;

static void *star_scan_part(void *argument) {
    StarScan *part = argument;
    const uint8_t *p = part->p, *end = part->end;
    while (part->plain && p < end) {
        if (star_block(p, end)) {
            part->block = 1;
            break;
        }
        StarValue value;
        Py_ssize_t count = 0;
        int found;
        while ((found = star_value(&p, end, &value)) > 0) {
            if (count < part->columns)
                part->masks[count] |= (uint8_t)star_class(&value), part->sizes[count] += value.length;
            count++;
        }
        if (found == 0) part->lines += p[-1] == '\n'; /* a line read moves p past at least one byte */
        part->plain = found == 0 && (count == 0 || count == part->columns);
        part->rows += count > 0;
    }
    part->p = p;
    return NULL;
}

static PyObject *star_scan(PyObject *self, PyObject *args) {
    Py_buffer text = {0};
    Py_ssize_t start, columns;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nn:star_scan", &text, &start, &columns)) return NULL;
    if (start < 0 || start > text.len || columns < 1 || columns > STAR_MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "start lies outside the text, or columns is not 1 to 65536");
        goto done;
    }
    uint8_t *masks = calloc((size_t)columns * 2, 1);
    uint64_t *sizes = calloc((size_t)columns * 2, sizeof *sizes);
    if (masks == NULL || sizes == NULL) {
        free(masks), free(sizes);
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *begin = (const uint8_t *)text.buf + start, *stop = (const uint8_t *)text.buf + text.len;
    const uint8_t *half = stop, *line_end;
    if (stop - begin >= 2 * STAR_THREAD_BYTES &&
        (line_end = memchr(begin + (stop - begin) / 2, '\n', (size_t)(stop - begin - (stop - begin) / 2))))
        half = line_end + 1;
    StarScan first = {begin, half, columns, 0, 0, masks, sizes, 1, 0};
    StarScan second = {half, stop, columns, 0, 0, masks + columns, sizes + columns, 1, 0};
    Py_BEGIN_ALLOW_THREADS;
    pthread_t thread;
    int apart = half < stop && !pthread_create(&thread, NULL, star_scan_part, &second);
    star_scan_part(&first);
    if (apart) pthread_join(thread, NULL);
    else if (half < stop) star_scan_part(&second);
    Py_END_ALLOW_THREADS;
    int plain = first.plain, whole = first.p == half && !first.block && half < stop; /* the loop goes on past half */
    PyObject *half_sized = star_sizes(sizes, columns);
    if (whole) {
        plain = second.plain;
        for (Py_ssize_t c = 0; c < columns; c++) masks[c] |= masks[columns + c], sizes[c] += sizes[columns + c];
    }
    char *kinds = (char *)masks;
    for (Py_ssize_t c = 0; plain && c < columns; c++) {
        int mask = masks[c];
        if (mask == STAR_INT) kinds[c] = 'i';
        else if (!(mask & ~(STAR_INT | STAR_FLOAT | STAR_NA))) kinds[c] = 'f';
        else if (mask == STAR_TEXT) kinds[c] = 't';
        else plain = 0;
    }
    Py_ssize_t rows = first.rows + (whole ? second.rows : 0), lines = first.lines + (whole ? second.lines : 0);
    const uint8_t *end = whole ? second.p : first.p;
    if (half_sized != NULL && (!plain || rows == 0)) {
        result = Py_NewRef(Py_None);
    } else if (half_sized != NULL) {
        PyObject *sized = star_sizes(sizes, columns);
        if (sized != NULL)
            result = Py_BuildValue("(nnny#O(nnO))", (Py_ssize_t)(end - (const uint8_t *)text.buf), rows, lines, kinds,
                                   columns, sized, (Py_ssize_t)(first.p - (const uint8_t *)text.buf), first.rows,
                                   half_sized);
        Py_XDECREF(sized);
    }
    Py_XDECREF(half_sized);
    free(masks), free(sizes);
done:
    PyBuffer_Release(&text);
    return result;
}

typedef struct {
    char kind;
    Py_buffer values, data; /* data: the bytes of text values */
} StarColumn;

/* Rows of a loop written by one thread: text[p:end] into rows `row` to `rows` of the columns, the
 * text values of column c from at[c] up to limit[c] of its data. The row and column of the first
 * value that does not fit is left in bad_row and bad_column (-1 if all fit). */
typedef struct {
    const uint8_t *p, *end;
    StarColumn *columns;
    Py_ssize_t count, row, rows, bad_row, bad_column;
    int64_t *at, *limit;
} StarPart;

static void *star_write(void *argument) {
    StarPart *part = argument;
    const uint8_t *p = part->p;
    Py_ssize_t row = part->row, count = part->count;
    while (p < part->end) {
        StarValue v;
        Py_ssize_t c = 0;
        int found;
        while ((found = star_value(&p, part->end, &v)) > 0) {
            const uint8_t *value = v.start;
            size_t length = v.length;
            StarColumn *column = part->columns + c;
            int ok = c < count && row < part->rows;
            if (ok && column->kind == 'i') {
                const uint8_t *q = value, *e = value + length;
                int negative = q < e && *q == '-';
                q += q < e && (*q == '-' || *q == '+');
                int64_t number = 0;
                ok = q < e && e - q <= 18;
                for (; ok && q < e; q++) ok = star_digit(*q), number = number * 10 + (*q - '0');
                ((int64_t *)column->values.buf)[row] = negative ? -number : number;
            } else if (ok && column->kind == 'f') {
                double *out = (double *)column->values.buf + row;
                if (star_class(&v) == STAR_NA) *out = NAN;
                else ok = star_number(value, length, out);
            } else if (ok) {
                int64_t at = part->at[c];
                ok = (uint64_t)length <= (uint64_t)(part->limit[c] - at);
                if (ok) {
                    memcpy((uint8_t *)column->data.buf + at, value, length);
                    ((int64_t *)column->values.buf)[row + 1] = part->at[c] = at + (int64_t)length;
                }
            }
            if (!ok) {
                part->bad_row = row, part->bad_column = c;
                return NULL;
            }
            c++;
        }
        if (found < 0 || (c != 0 && c != count)) {
            part->bad_row = row, part->bad_column = c;
            return NULL;
        }
        row += c > 0;
    }
    if (row != part->rows) part->bad_row = row, part->bad_column = 0;
    return NULL;
}

static PyObject *star_fill(PyObject *self, PyObject *args) {
    Py_buffer text = {0};
    Py_ssize_t start, end, kinds_length;
    const char *kinds;
    PyObject *outs, *half_sizes, *result = NULL;
    Py_ssize_t half, half_rows;
    if (!PyArg_ParseTuple(args, "y*nny#O!(nnO!):star_fill", &text, &start, &end, &kinds, &kinds_length,
                          &PyTuple_Type, &outs, &half, &half_rows, &PyTuple_Type, &half_sizes))
        return NULL;
    Py_ssize_t count = kinds_length, rows = -1, taken = 0;
    StarColumn *columns = NULL;
    int64_t *bounds = NULL; /* where the text of each half starts and ends: 4 arrays of a value per column */
    if (start < 0 || end < start || end > text.len || half < start || half > end || count < 1 ||
        count > STAR_MAX_COLUMNS || PyTuple_Size(outs) != count || PyTuple_Size(half_sizes) != count) {
        PyErr_SetString(PyExc_ValueError, "start, the half and end lie outside the text in another order, or outs "
                                          "and the half's sizes are not one per kind");
        goto done;
    }
    if ((columns = PyMem_Calloc((size_t)count, sizeof *columns)) == NULL ||
        (bounds = PyMem_Calloc((size_t)count * 4, sizeof *bounds)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; taken < count; taken++) {
        StarColumn *column = columns + taken;
        PyObject *out = PyTuple_GetItem(outs, taken);
        column->kind = kinds[taken];
        if (column->kind == 't') {
            PyObject *values, *data;
            if (!PyArg_ParseTuple(out, "OO:star_fill", &values, &data)) goto done;
            if (PyObject_GetBuffer(values, &column->values, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
            if (PyObject_GetBuffer(data, &column->data, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
                PyBuffer_Release(&column->values);
                goto done;
            }
        } else if ((column->kind != 'i' && column->kind != 'f') ||
                   PyObject_GetBuffer(out, &column->values, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a kind is b'i', b'f' or b't'");
            goto done;
        }
        Py_ssize_t room = column->values.len / 8 - (column->kind == 't');
        if (column->values.len % 8 || room < 0) {
            PyErr_SetString(PyExc_ValueError, "outs are arrays of 8-byte values");
            taken++;
            goto done;
        }
        rows = rows < 0 || room < rows ? room : rows;
        long long size = PyLong_AsLongLong(PyTuple_GetItem(half_sizes, taken));
        if (PyErr_Occurred()) {
            taken++;
            goto done;
        }
        int64_t length = column->kind == 't' ? (int64_t)column->data.len : 0;
        bounds[count + taken] = bounds[2 * count + taken] = size < 0 || size > length ? length : size;
        bounds[3 * count + taken] = length;
        if (column->kind == 't') ((int64_t *)column->values.buf)[0] = 0;
    }
    if (half_rows < 0 || half_rows > rows) {
        PyErr_SetString(PyExc_ValueError, "the half's rows are more than outs hold");
        goto done;
    }
    const uint8_t *at = text.buf;
    StarPart first = {at + start, at + half, columns, count, 0, half_rows, -1, -1, bounds, bounds + count};
    StarPart second = {at + half, at + end, columns, count, half_rows, rows, -1, -1, bounds + 2 * count,
                       bounds + 3 * count};
    Py_BEGIN_ALLOW_THREADS;
    pthread_t thread;
    int apart = end - half >= STAR_THREAD_BYTES && !pthread_create(&thread, NULL, star_write, &second);
    star_write(&first);
    if (apart) pthread_join(thread, NULL);
    else star_write(&second);
    Py_END_ALLOW_THREADS;
    StarPart *bad = first.bad_row >= 0 ? &first : second.bad_row >= 0 ? &second : NULL;
    for (Py_ssize_t c = 0; bad == NULL && c < count; c++)
        if (first.at[c] != first.limit[c] || second.at[c] != second.limit[c]) bad = &second;
    if (bad != NULL)
        PyErr_Format(PyExc_ValueError, "row %zd, column %zd of the loop is not what its kind says, or does not fit",
                     bad->bad_row, bad->bad_column);
    else
        result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t c = 0; columns != NULL && c < taken; c++) {
        PyBuffer_Release(&columns[c].values);
        if (columns[c].kind == 't') PyBuffer_Release(&columns[c].data);
    }
    PyMem_Free(columns), PyMem_Free(bounds);
    PyBuffer_Release(&text);
    return result;
}

/* ---- RELION's image names, and locations made in bulk ----
 *
 *   split_image_names(offsets, data, indices, codes) -> None | list[str]
 *     Splits the names "index@path" of an Arrow string array (int64 `offsets`, rows + 1 of them, into
 *     `data`) into the index of each, counting from zero, written into `indices` (int64), and the
 *     number of its path among the distinct paths, written into `codes` (int64); returns the distinct
 *     paths, in the order they first appear. None if a name is not of 1 to 18 digits, `@` and a path
 *     of printable ASCII, or an index is 0: the general parser says what is wrong.
 *
 *   new_locations(cls, key_slot, index_slot, keys, key_ids, indices) -> list
 *     Objects of `cls` (a class whose instances object.__new__ makes), one per row, made without
 *     calling __init__: `key_slot` (a slot's descriptor) set to keys[key_ids[i]] (str), `index_slot`
 *     to indices[i] (int64, -1 or more): how ImageLocation keeps its key and index.
 */

typedef struct {
    const uint8_t *data;
    int64_t *firsts; /* of each distinct path: its start in data and its length, in pairs */
    int64_t distinct, capacity;
    int64_t *table; /* code + 1 of each slot, 0 for an empty one */
    uint64_t mask;
} PathCodes;

static uint64_t path_hash(const uint8_t *s, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* The code of the path [start, start + n) of codes->data, a new one if it is new; -1 if out of memory. */
static int64_t path_code(PathCodes *codes, int64_t start, int64_t n) {
    if (codes->distinct * 2 >= (int64_t)codes->mask) {
        uint64_t mask = codes->mask * 2 + 1;
        int64_t *table = calloc(mask + 1, sizeof *table);
        if (table == NULL) return -1;
        for (int64_t code = 0; code < codes->distinct; code++) {
            uint64_t slot = path_hash(codes->data + codes->firsts[2 * code], codes->firsts[2 * code + 1]) & mask;
            while (table[slot]) slot = (slot + 1) & mask;
            table[slot] = code + 1;
        }
        free(codes->table);
        codes->table = table, codes->mask = mask;
    }
    const uint8_t *path = codes->data + start;
    uint64_t slot = path_hash(path, n) & codes->mask;
    for (; codes->table[slot]; slot = (slot + 1) & codes->mask) {
        int64_t code = codes->table[slot] - 1;
        if (codes->firsts[2 * code + 1] == n && !memcmp(codes->data + codes->firsts[2 * code], path, (size_t)n))
            return code;
    }
    if (codes->distinct == codes->capacity) {
        int64_t *firsts = realloc(codes->firsts, (size_t)codes->capacity * 4 * sizeof *firsts);
        if (firsts == NULL) return -1;
        codes->firsts = firsts, codes->capacity *= 2;
    }
    codes->firsts[2 * codes->distinct] = start, codes->firsts[2 * codes->distinct + 1] = n;
    codes->table[slot] = codes->distinct + 1;
    return codes->distinct++;
}

/* 1 if every name splits, 0 if one does not, -1 if out of memory. */
static int split_names(const int64_t *offsets, Py_ssize_t rows, int64_t *indices, int64_t *out, PathCodes *codes) {
    int64_t previous = -1, previous_start = 0, previous_n = -1;
    for (Py_ssize_t row = 0; row < rows; row++) {
        const uint8_t *s = codes->data + offsets[row], *e = codes->data + offsets[row + 1], *p = s;
        int64_t index = 0;
        while (p < e && star_digit(*p) && p - s < 18) index = index * 10 + (*p++ - '0');
        if (p == s || p == e || *p != '@' || index == 0 || ++p == e) return 0;
        for (const uint8_t *q = p; q < e; q++)
            if (*q <= ' ' || *q >= 0x7f) return 0; /* Python's \s has more than spaces and controls */
        int64_t start = p - codes->data, n = e - p;
        if (n != previous_n || memcmp(p, codes->data + previous_start, (size_t)n)) {
            if ((previous = path_code(codes, start, n)) < 0) return -1;
            previous_start = start, previous_n = n;
        }
        indices[row] = index - 1, out[row] = previous;
    }
    return 1;
}

static PyObject *split_image_names(PyObject *self, PyObject *args) {
    Py_buffer offsets = {0}, data = {0}, indices = {0}, out = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*w*w*:split_image_names", &offsets, &data, &indices, &out)) return NULL;
    Py_ssize_t rows = offsets.len / 8 - 1;
    const int64_t *at = (const int64_t *)offsets.buf;
    int ok = offsets.len % 8 == 0 && rows >= 0 && indices.len == rows * 8 && out.len == rows * 8;
    for (Py_ssize_t row = 0; ok && row <= rows; row++)
        ok = at[row] >= (row ? at[row - 1] : 0) && at[row] <= data.len;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "offsets are int64, rows + 1 ascending within data; indices and codes "
                                          "int64, one per row");
        goto done;
    }
    PathCodes codes = {data.buf, malloc(2 * 64 * sizeof(int64_t)), 0, 64, calloc(128, sizeof(int64_t)), 127};
    int split = codes.firsts != NULL && codes.table != NULL ? 0 : -1;
    if (split == 0) {
        Py_BEGIN_ALLOW_THREADS;
        split = split_names(at, rows, (int64_t *)indices.buf, (int64_t *)out.buf, &codes);
        Py_END_ALLOW_THREADS;
    }
    if (split < 0) {
        PyErr_NoMemory();
    } else if (split == 0) {
        result = Py_NewRef(Py_None);
    } else if ((result = PyList_New(codes.distinct)) != NULL) {
        for (int64_t code = 0; code < codes.distinct; code++) {
            PyObject *path = PyUnicode_DecodeUTF8((const char *)data.buf + codes.firsts[2 * code],
                                                  codes.firsts[2 * code + 1], NULL);
            if (path == NULL || PyList_SetItem(result, code, path) < 0) {
                Py_CLEAR(result);
                break;
            }
        }
    }
    free(codes.firsts), free(codes.table);
done:
    release_views((Py_buffer *const[]){&offsets, &data, &indices, &out, NULL});
    return result;
}

static PyObject *new_locations(PyObject *self, PyObject *args) {
    PyObject *cls, *key_slot, *index_slot, *keys, *result = NULL;
    Py_buffer ids = {0}, indices = {0};
    if (!PyArg_ParseTuple(args, "O!OOO!y*y*:new_locations", &PyType_Type, &cls, &key_slot, &index_slot,
                          &PyList_Type, &keys, &ids, &indices))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)cls;
    descrsetfunc set_key = PyType_GetSlot(Py_TYPE(key_slot), Py_tp_descr_set);
    descrsetfunc set_index = PyType_GetSlot(Py_TYPE(index_slot), Py_tp_descr_set);
    allocfunc alloc = PyType_GetSlot(type, Py_tp_alloc);
    Py_ssize_t rows = ids.len / 8, count = PyList_Size(keys);
    const int64_t *id = (const int64_t *)ids.buf, *index = (const int64_t *)indices.buf;
    int ok = set_key != NULL && set_index != NULL && alloc != NULL &&
             PyType_GetSlot(type, Py_tp_new) == PyType_GetSlot(&PyBaseObject_Type, Py_tp_new) &&
             ids.len % 8 == 0 && indices.len == ids.len;
    for (Py_ssize_t row = 0; ok && row < rows; row++) ok = id[row] >= 0 && id[row] < count && index[row] >= -1;
    for (Py_ssize_t key = 0; ok && key < count; key++) ok = PyUnicode_Check(PyList_GetItem(keys, key));
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "cls is made by object.__new__, the slots are descriptors, keys are "
                                          "str, key_ids number them, as many as indices (-1 or more), int64");
        goto done;
    }
    if ((result = PyList_New(rows)) == NULL) goto done;
    int collecting = PyGC_Disable(); /* else each few hundred objects made walk those made before */
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *made = alloc(type, 0), *number = PyLong_FromLongLong(index[row]);
        int failed = made == NULL || number == NULL || set_key(key_slot, made, PyList_GetItem(keys, id[row])) < 0 ||
                     set_index(index_slot, made, number) < 0;
        Py_XDECREF(number);
        if (failed || PyList_SetItem(result, row, made) < 0) {
            if (failed) Py_XDECREF(made);
            Py_CLEAR(result);
            break;
        }
    }
    if (collecting) PyGC_Enable();
done:
    release_views((Py_buffer *const[]){&ids, &indices, NULL});
    return result;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS, "Add the events of EER strips into an image."},
    {"events", events, METH_VARARGS, "Write the sub-pixel positions of the events of EER strips."},
    {"lzw_check", lzw_check, METH_VARARGS, "Find a code in a TIFF LZW segment that crashes imagecodecs."},
    {"map_file", map_file, METH_VARARGS, "Map the start of a file; pages that cannot be read read as zeros."},
    {"read_runs", read_runs, METH_VARARGS, "Read runs of values of files into an array, converting them."},
    {"advise", advise, METH_VARARGS, "Tell the kernel runs of files will be read soon."},
    {"advise_map", advise_map, METH_VARARGS, "Tell the kernel ranges of a map will be read soon."},
    {"convert", convert, METH_VARARGS, "Convert values of one kind into another."},
    {"crop", crop, METH_VARARGS, "Crop patches out of an image, converting them."},
    {"simd", simd, METH_VARARGS, "Whether conversions use the processor's vector extensions (for tests)."},
    {"star_scan", star_scan, METH_VARARGS, "Find the end, rows and kinds of columns of the plain rows of a STAR loop."},
    {"star_fill", star_fill, METH_VARARGS, "Write the values of the plain rows of a STAR loop into arrays."},
    {"split_image_names", split_image_names, METH_VARARGS, "Split RELION's index@path names into indices and paths."},
    {"new_locations", new_locations, METH_VARARGS, "Make locations of keys and indices without calling __init__."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "Decoding of EER electron event streams, a check of TIFF LZW segments, guarded file maps, and "
             "batch reads and conversions of raw images.",
    .m_size = -1,
    .m_methods = methods,
};

/* The numbers of the interface, by the names Python code and vitrio/_native.pyi use. */
static const struct {
    const char *name;
    long value;
} constants[] = {
    {"KIND_U8", K_U8},
    {"KIND_I8", K_I8},
    {"KIND_U16", K_U16},
    {"KIND_I16", K_I16},
    {"KIND_F16", K_F16},
    {"KIND_F32", K_F32},
    {"KIND_BYTES", K_BYTES},
    {"KIND_BF16", K_BF16},
    {"SWAP", SWAP},
    {"RENDER_U8", RENDER_U8},
    {"RENDER_U16", RENDER_U16},
    {"RENDER_U32", RENDER_U32},
    {"RENDER_F32", RENDER_F32},
    {"EER_TRUNCATED", EER_TRUNCATED},
    {"EER_PAST_END", EER_PAST_END},
    {"EER_FULL", EER_FULL},
    {"READ_OPEN", READ_OPEN},
    {"READ_CHANGED", READ_CHANGED},
    {"READ_ERROR", READ_ERROR},
    {"READ_SHORT", READ_SHORT},
    {"RUN_FILE", RUN_FILE},
    {"RUN_OFFSET", RUN_OFFSET},
    {"RUN_COUNT", RUN_COUNT},
    {"RUN_DESTINATION", RUN_DESTINATION},
    {"RUN_FIELDS", RUN_FIELDS},
    {"CHECK_SIZE", CHECK_SIZE},
    {"CHECK_MTIME", CHECK_MTIME},
    {"CHECK_INODE", CHECK_INODE},
    {"CHECK_DEVICE", CHECK_DEVICE},
    {"CHECK_KIND", CHECK_KIND},
    {"CHECK_FIELDS", CHECK_FIELDS},
};

PyMODINIT_FUNC PyInit__native(void) {
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    if (!star_init()) return PyErr_NoMemory();
#ifdef X86
    __builtin_cpu_init();
    has_f16c = cpu_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    has_avx2 = cpu_avx2 = __builtin_cpu_supports("avx2");
#endif
    if (pthread_key_create(&buffer_key, free)) return PyErr_NoMemory();
    if ((FileMapType = (PyTypeObject *)PyType_FromSpec(&filemap_spec)) == NULL) return NULL;
    PyObject *created = PyModule_Create(&module);
    for (size_t i = 0; created != NULL && i < sizeof constants / sizeof constants[0]; i++) {
        if (PyModule_AddIntConstant(created, constants[i].name, constants[i].value) < 0) Py_CLEAR(created);
    }
    return created;
}
