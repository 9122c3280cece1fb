/* A guard of the TIFF reader, vitrio/formats/tiff.py, which owns its use; it has no constants of the
 * interface and no tables of Python's:
 *
 *   lzw_check(data, size)
 *     Walks the codes of a TIFF LZW segment as imagecodecs' decoder does when
 *     it decodes `size` bytes of it, and returns the offset of the byte that
 *     holds the first code after a CLEAR code when that code is not a literal
 *     (256 or more), or None. That decoder (imcd_lzw_decode, as of imagecodecs
 *     2026.3.6) takes such a code as a table entry without checking it, then
 *     reads entries it never made: a corrupt segment crashes it.
 */
#include "native.h"

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

PyObject *vitrio_lzw_check(PyObject *self, PyObject *args) {
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
