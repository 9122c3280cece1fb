/* LZ4's block format decoded, for the compressed columns of cryoSPARC's `.cs` stream files
 * (vitrio/data/_cs.py owns its use); it has no constants of the interface.
 *
 *   lz4_decode(block, out) -> None
 *     Decodes the LZ4 block `block` into `out`, a writable buffer it must fill exactly. A block is
 *     sequences of a token (literals' length in its high four bits, the match's less 4 in its low
 *     four, 15 followed by bytes to add up to 255 each until one is smaller), the literals, and a
 *     match: a two-byte little-endian offset back into what is decoded, copied as many bytes; the last
 *     sequence is literals only. ValueError if the block ends inside a sequence, a match reaches
 *     before the start of `out` or past its end, or the block makes fewer bytes than `out` holds.
 *     The GIL is released.
 */
#include "native.h"

/* The length that `base` starts and the bytes from *at add to (each 255 goes on): -1 if `end` comes first. */
static int64_t lz4_length(int64_t base, const uint8_t **at, const uint8_t *end) {
    if (base != 15) return base;
    uint8_t more;
    do {
        if (*at == end) return -1;
        more = *(*at)++;
        base += more;
    } while (more == 255);
    return base;
}

/* 0 if `block` decodes into exactly `size` bytes at `out`, else -1. */
static int lz4_block(const uint8_t *block, int64_t length, uint8_t *out, int64_t size) {
    const uint8_t *in = block, *end = block + length;
    int64_t made = 0;
    while (in < end) {
        uint8_t token = *in++;
        int64_t literals = lz4_length(token >> 4, &in, end);
        if (literals < 0 || literals > end - in || literals > size - made) return -1;
        memcpy(out + made, in, (size_t)literals);
        in += literals, made += literals;
        if (in == end) break; /* the last sequence: literals only */
        if (end - in < 2) return -1;
        int64_t offset = in[0] | (int64_t)in[1] << 8;
        in += 2;
        int64_t match = lz4_length(token & 15, &in, end);
        if (offset == 0 || offset > made || match < 0 || match + 4 > size - made) return -1;
        match += 4;
        /* a match may overlap what it makes (a run): copy what lies between it and the end, doubling */
        int64_t from = made - offset;
        while (match > 0) {
            int64_t step = made - from < match ? made - from : match;
            memcpy(out + made, out + from, (size_t)step);
            made += step, match -= step;
        }
    }
    return length > 0 && made == size ? 0 : -1;
}

PyObject *vitrio_lz4_decode(PyObject *self, PyObject *args) {
    Py_buffer block = {0}, out = {0};
    if (!PyArg_ParseTuple(args, "y*w*:lz4_decode", &block, &out)) return NULL;
    int decoded;
    Py_BEGIN_ALLOW_THREADS;
    decoded = lz4_block(block.buf, block.len, out.buf, out.len);
    Py_END_ALLOW_THREADS;
    vitrio_release_views((Py_buffer *const[]){&block, &out, NULL});
    if (decoded < 0) {
        PyErr_SetString(PyExc_ValueError, "not an LZ4 block of as many bytes as out holds");
        return NULL;
    }
    Py_RETURN_NONE;
}
