/* The rows of a loop of a STAR file, for vitrio/data/_star_text.py, which owns the limit of columns
 * and the kinds of columns these share with it.
 *
 * Plain rows are read here, what the general parser (vitrio/data/_star_text.py, pandas' C parser
 * over chunks of the text) would make of them, value for value: printable ASCII split at spaces and
 * tabs, `#` starting a comment, LF or CRLF line ends, no quotes. The loop ends before the first line
 * that starts (after spaces and tabs) with `data_`, or at the end of the text. Anything else (another
 * byte, a row of more or fewer values than the loop has columns, a column whose values pandas would
 * take in a way this does not: booleans, infinities, text among numbers, NaN among text, an integer
 * written -0) is left to the general parser, which also says what is wrong.
 *
 *   star_read(text, start, kinds, outs) -> None | (end, rows, lines, kinds, block, texts)
 *     Reads the rows from byte `start` of `text` (a line's start) in one pass, each value converted as
 *     it is met, and stops at the line that starts a block (`block` true), at the end of the text, or
 *     at the row that `outs` have no room for: at byte `end`, after `rows` rows and `lines` line ends.
 *     `kinds` has a byte per column, what the loop's earlier rows made of it: b'i' integers (int64),
 *     b'f' numbers (float64; "nan", "NaN" and "<NA>" are NaN), b't' text, b'?' not known yet, b's' skipped
 *     (its values, of printable ASCII, are passed over, neither converted nor kept); the
 *     kinds returned are what these rows make of them (integers become numbers where a number comes,
 *     and the column's integers written here with them). `outs` has a writable array of 8-byte values
 *     per column not of text nor skipped, a value a row from its start (bytes ignored for those). `texts` has, of
 *     each column of text, a list of (rows, offsets, data): the Arrow layout of a string array
 *     (offsets int64, rows + 1 of them; data, the values one after another) in memory of its own.
 *     None if the rows are not plain. The GIL is released while it reads; a text of more than
 *     2 MiB is read in two halves, the second by a thread of its own. A line of spaces, tabs and
 *     values alone (as RELION writes them) has its values found by the bits of its blocks of 64
 *     bytes (SSE2), those of skipped columns never looked at; any other line is read byte by byte.
 *
 * Numbers are converted to the double nearest to their decimal value, as strtod converts them (±inf
 * past the largest, 0 or a subnormal below the smallest), bit for bit: of up to 19 digits making
 * at most 2^53 and a power of ten up to 22, the digits as an integer times or divided by that power,
 * each exact, so that the one rounding is the IEEE operation's (Clinger's fast path); else strtod in
 * the C locale.
 */
#include "native.h"
#include <float.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { STAR_INT = 1, STAR_FLOAT = 2, STAR_NA = 4, STAR_TEXT = 8, STAR_OTHER = 16 };
#define STAR_THREAD_BYTES (1 << 20) /* a half of rows at least this long is read by a thread of its own */
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
#define SB_AFTER (SB_SPACE | SB_LINE | SB_CR | SB_HASH) /* what may follow a value */

static uint16_t star_bytes[256];
static locale_t star_locale; /* "C": numbers read the same whatever the process's locale */
static size_t star_page;

/* Memory of the extension's own (a column's text, its offsets), read-only to Python through the
 * buffer protocol, freed with the object. */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t length;
    size_t room; /* of a map of its own, else 0: malloc's */
} StarBuffer;

static int star_buffer_get(PyObject *self, Py_buffer *view, int flags) {
    StarBuffer *buffer = (StarBuffer *)self;
    return PyBuffer_FillInfo(view, self, buffer->data, buffer->length, 1, flags);
}

static void star_buffer_dealloc(PyObject *self) {
    StarBuffer *buffer = (StarBuffer *)self;
    if (buffer->room) munmap(buffer->data, buffer->room);
    else free(buffer->data);
    PyTypeObject *type = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DECREF(type);
}

static PyType_Slot star_buffer_slots[] = {
    {Py_tp_dealloc, star_buffer_dealloc},
    {Py_bf_getbuffer, star_buffer_get},
    {Py_tp_doc, "Read-only memory of the values of a column of a STAR loop, or their offsets."},
    {0, NULL},
};

static PyType_Spec star_buffer_spec = {
    .name = "vitrio._native.StarBuffer",
    .basicsize = sizeof(StarBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = star_buffer_slots,
};

static PyTypeObject *StarBufferType;

int vitrio_star_init(void) {
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
    star_page = (size_t)sysconf(_SC_PAGESIZE);
    StarBufferType = (PyTypeObject *)PyType_FromSpec(&star_buffer_spec);
    return star_locale != (locale_t)0 && StarBufferType != NULL;
}

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
    return end - p >= 5 && *p == 'd' && memcmp(p, "data_", 5) == 0;
}

/* What a value may be: STAR_NA, STAR_INT (of at most 18 bytes,
 * which int64 holds), STAR_FLOAT, STAR_TEXT (a number in no spelling), or STAR_OTHER (left to the general
 * parser: booleans, infinities, NaN in another spelling). Numbers are told by their bytes alone:
 * star_read parses them whole, and refuses what is not. */
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

/* A number spelled [+-]digits[.digits][(e|E)[+-]digits], as it is read. */
typedef struct {
    uint64_t sum;           /* the digits as an integer, where there are at most 19 of them */
    int64_t digits, scale;  /* the number is sum * 10^scale */
    int negative, whole;    /* whole: spelled as an integer, without a point or an exponent */
    int exponent_digits;
} StarDecimal;

static const uint64_t star_tens[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* The digits at q, at most 8, read at once from the 8 bytes there (the first in the lowest byte of a
 * word, as x86 and ARM load them): their count, *value then their value. */
static inline int star_eight(const uint8_t *q, uint64_t *value) {
    uint64_t word, values;
    memcpy(&word, q, 8);
    values = word - 0x3030303030303030ull; /* a byte below '0' borrows only from those after it */
    uint64_t others = (values | (word + 0x4646464646464646ull)) & 0x8080808080808080ull;
    int n = others ? __builtin_ctzll(others) >> 3 : 8;
    if (n == 0) return *value = 0, 0;
    values <<= 64 - 8 * n; /* the digits alone, zeros before them */
    values = values * 10 + (values >> 8);
    *value = (((values & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
              (((values >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >>
             32;
    return n;
}

#define STAR_WORDS (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) /* digits read 8 at a time */

/* The digits at *p, at most 8: their count, *sum then sum * 10^count + their value. */
static inline int star_digits(const uint8_t **p, const uint8_t *e, uint64_t *sum) {
    const uint8_t *q = *p;
    int n = 0;
    if (e - q >= 8 && STAR_WORDS) {
        uint64_t value;
        n = star_eight(q, &value);
        *sum = *sum * star_tens[n] + value;
    } else {
        for (; n < 8 && q + n < e && vitrio_digit(q[n]); n++) *sum = *sum * 10 + (uint64_t)(q[n] - '0');
    }
    *p = q + n;
    return n;
}

/* The end of the number at p where it is spelled as most are, [+-]digits[.digits] of at most 7 digits
 * each (so that the digits and 10^decimals are exact in a double): an integer in *whole where it has
 * no point (*point 0), else its double in *out (*point 1); NULL where it is spelled otherwise (-0 as an
 * integer too), or too near `e` to read 8 bytes twice. */
static inline const uint8_t *star_plain_number(const uint8_t *p, const uint8_t *e, double *out, int64_t *whole,
                                               int *point) {
    int negative = *p == '-', decimals = 0;
    const uint8_t *s = p + (*p == '-' || *p == '+');
    uint64_t integer, fraction = 0;
    if (!STAR_WORDS || e - s < 17) return NULL;
    int n = star_eight(s, &integer);
    if (n == 8) return NULL;
    s += n;
    *point = *s == '.';
    if (*point) {
        decimals = star_eight(++s, &fraction);
        if (decimals == 8 || n + decimals == 0) return NULL;
        s += decimals;
    } else if (n == 0 || (negative && integer == 0)) {
        return NULL;
    }
    if (!(star_bytes[*s] & SB_AFTER)) return NULL; /* an exponent, or not a number */
    if (!*point) {
        *whole = negative ? -(int64_t)integer : (int64_t)integer;
        return s;
    }
    double number = (double)(integer * star_tens[decimals] + fraction) / star_exact[decimals];
    uint64_t bits; /* the sign set without a branch: half the angles and shifts are negative, at random */
    memcpy(&bits, &number, sizeof bits);
    bits |= (uint64_t)negative << 63;
    memcpy(out, &bits, sizeof bits);
    return s;
}

/* The end of the number spelled from p, or NULL where no number is spelled there. */
static inline const uint8_t *star_decimal(const uint8_t *p, const uint8_t *e, StarDecimal *d) {
    int64_t digits = 0, decimals = 0; /* of a value of up to the text's length */
    int exponent = 0, exponent_digits = 0, minus = 0, n;
    uint64_t sum = 0; /* wraps past 19 digits, where it is not used */
    d->negative = p < e && *p == '-';
    p += p < e && (*p == '-' || *p == '+');
    do digits += n = star_digits(&p, e, &sum);
    while (n == 8);
    d->whole = !(p < e && (*p == '.' || *p == 'e' || *p == 'E'));
    if (p < e && *p == '.') {
        p++;
        do decimals += n = star_digits(&p, e, &sum);
        while (n == 8);
        digits += decimals;
    }
    if (digits == 0) return NULL;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) minus = *p++ == '-';
        for (; p < e && vitrio_digit(*p); p++) /* 6 counts as more than 5: only strtod reads those */
            if (exponent_digits < 6) exponent = exponent * 10 + (*p - '0'), exponent_digits++;
        if (exponent_digits == 0) return NULL;
    }
    d->sum = sum, d->digits = digits, d->exponent_digits = exponent_digits;
    d->scale = (minus ? -exponent : exponent) - decimals;
    return p;
}

/* The double nearest to the number spelled in [s, e), which star_decimal read as d (see the top of
 * the file): 1, or 0 where it is longer than strtod is given here (127 bytes). */
static inline int star_double(const uint8_t *s, const uint8_t *e, const StarDecimal *d, double *out) {
#if FLT_EVAL_METHOD == 0 /* each operation rounded to double, as the fast path needs */
    if (d->digits <= 19 && d->sum <= (uint64_t)1 << 53 && d->exponent_digits <= 5 && d->scale >= -22 &&
        d->scale <= 22) {
        double number = (double)d->sum; /* exact */
        number = d->scale >= 0 ? number * star_exact[d->scale] : number / star_exact[-d->scale];
        *out = d->negative ? -number : number;
        return 1;
    }
#endif
    char text[128];
    size_t n = (size_t)(e - s);
    if (n >= sizeof text) return 0;
    memcpy(text, s, n);
    text[n] = 0;
    char *end;
    *out = strtod_l(text, &end, star_locale);
    return end == text + n;
}

/* Where the value that starts at p ends: its first byte that is not printable ASCII, or a quote or '#'. */
static inline const uint8_t *star_value_end(const uint8_t *p, const uint8_t *e) {
#ifdef __SSE2__
    const __m128i space = _mm_set1_epi8(' '), delete = _mm_set1_epi8(0x7f), hash = _mm_set1_epi8('#'),
                  quote = _mm_set1_epi8('"'), apostrophe = _mm_set1_epi8('\'');
    for (; e - p >= 16; p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i refused = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, delete), _mm_cmpeq_epi8(v, hash)),
                                       _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, apostrophe)));
        /* signed: the bytes from 0x80 are below the space */
        unsigned taken = (unsigned)_mm_movemask_epi8(_mm_andnot_si128(refused, _mm_cmpgt_epi8(v, space)));
        if (taken != 0xffff) return p + __builtin_ctz(~taken);
    }
#endif
    while (p < e && star_bytes[*p] & SB_VALUE) p++;
    return p;
}

/* Memory a column's text or offsets grow in: malloc's while small, a map of its own from
 * STAR_MAP_BYTES, so that the room given back as it grows or once it is read goes back to the system
 * at once, never a hole in malloc's heap that the process keeps. */
typedef struct {
    uint8_t *data;
    size_t room;
    int mapped;
} StarMemory;

#define STAR_MAP_BYTES ((size_t)1 << 20)

static void star_release(uint8_t *data, size_t room, int mapped) {
    if (mapped) munmap(data, room);
    else free(data);
}

/* Grows m to at least `want` bytes, keeping its first `kept`: 1, or 0 out of memory. */
static int star_grow(StarMemory *m, size_t kept, size_t want) {
    size_t room = m->room ? m->room : 1 << 14;
    while (room < want) room *= 2;
    if (room < STAR_MAP_BYTES) {
        uint8_t *data = realloc(m->data, room);
        if (data == NULL) return 0;
        m->data = data, m->room = room;
        return 1;
    }
    room = (room + star_page - 1) & ~(star_page - 1);
    uint8_t *data;
#ifdef MREMAP_MAYMOVE
    if (m->mapped) {
        if ((data = mremap(m->data, m->room, room, MREMAP_MAYMOVE)) == MAP_FAILED) return 0;
        m->data = data, m->room = room;
        return 1;
    }
#endif
    if ((data = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) return 0;
#ifdef MADV_HUGEPAGE
    madvise(data, room, MADV_HUGEPAGE); /* a hint: a fault a page of 2 MiB, where faults of 4 KiB took a third of
                                           the time text took (the advice stays with the map as it grows) */
#endif
    if (kept) memcpy(data, m->data, kept);
    star_release(m->data, m->room, m->mapped);
    m->data = data, m->room = room, m->mapped = 1;
    return 1;
}

/* Gives back the room of m past its first `kept` bytes (at least one). */
static void star_shrink(StarMemory *m, size_t kept) {
    if (!m->mapped) {
        uint8_t *data = realloc(m->data, kept);
        if (data != NULL) m->data = data, m->room = kept;
        return;
    }
    size_t room = (kept + star_page - 1) & ~(star_page - 1);
    if (room < m->room) munmap(m->data + room, m->room - room), m->room = room;
}

/* A column's text as it is read: the Arrow layout of a string array. */
typedef struct {
    StarMemory offsets, data;
    Py_ssize_t rows;
    size_t size;
} StarText;

/* Appends a value: 1, or 0 out of memory. */
static inline int star_text_add(StarText *text, const uint8_t *value, size_t n) {
    size_t offsets = (size_t)(text->rows + 2) * sizeof(int64_t);
    if (offsets > text->offsets.room) {
        if (!star_grow(&text->offsets, offsets - sizeof(int64_t), offsets)) return 0;
        ((int64_t *)text->offsets.data)[0] = 0;
    }
    if (n > text->data.room - text->size && !star_grow(&text->data, text->size, text->size + n)) return 0;
    memcpy(text->data.data + text->size, value, n);
    text->size += n;
    ((int64_t *)text->offsets.data)[++text->rows] = (int64_t)text->size;
    return 1;
}

enum { READ_ON, READ_BLOCK, READ_FULL, READ_NOT_PLAIN, READ_NO_MEMORY };

/* Rows of a loop read by one thread: from p up to `end` (a line start, or the end of the text), or to
 * the line that starts a block, or to what is not plain, or to the row the outs have no room for. */
typedef struct {
    const uint8_t *p, *end;
    Py_ssize_t columns, row, room; /* the rows are written from `row` of outs, at most `room` of them */
    Py_ssize_t rows, lines;
    char *kinds;
    uint8_t **outs; /* of each column, its 8-byte values, from row 0 of the loop's rows read here */
    StarText *texts;
    int status;
} StarReader;

/* The column c of this reader made one of numbers, the integers it read made numbers. */
static void star_numbers(StarReader *reader, Py_ssize_t c) {
    int64_t *values = (int64_t *)reader->outs[c] + reader->row;
    if (reader->kinds[c] == 'i')
        for (Py_ssize_t r = 0; r < reader->rows; r++) {
            double number = (double)values[r];
            memcpy(values + r, &number, sizeof number);
        }
    reader->kinds[c] = 'f';
}

static const uint8_t *star_read_other(StarReader *reader, const uint8_t *p, Py_ssize_t c, Py_ssize_t row);

/* Reads the value at p into column c of row `row` (`reader->row + reader->rows`, as are `kinds` and `outs`
 * the reader's, held where the compiler need not load them again after each value): its end, or NULL
 * (the status set). A number spelled as most are is read here, in line; any other value by
 * star_read_other. */
static inline const uint8_t *star_read_value(StarReader *reader, char *kinds, uint8_t *const *outs,
                                             const uint8_t *p, Py_ssize_t c, Py_ssize_t row) {
    char kind = kinds[c];
    double number;
    int64_t whole;
    int point;
    const uint8_t *plain = star_plain_number(p, reader->end, &number, &whole, &point);
    if (plain != NULL && (kind == 'f' || (kind != 't' && !point))) { /* as most numbers are */
        if (kind == 'f' && !point) number = (double)whole;
        if (kind == 'f' || point) ((double *)outs[c])[row] = number;
        else ((int64_t *)outs[c])[row] = whole;
        if (kind == '?') kinds[c] = point ? 'f' : 'i';
        return plain;
    }
    return star_read_other(reader, p, c, row);
}

/* Reads the value at p into column c of row `row`, as star_read_value, where it is not a number spelled
 * as most are. */
__attribute__((noinline)) static const uint8_t *star_read_other(StarReader *reader, const uint8_t *p,
                                                                 Py_ssize_t c, Py_ssize_t row) {
    const uint8_t *end = reader->end;
    char kind = reader->kinds[c];
    if (kind != 't') {
        StarDecimal d;
        const uint8_t *q = star_decimal(p, end, &d);
        if (q != NULL && (q == end || star_bytes[*q] & SB_AFTER)) {
            if (d.whole && (q - p > 18 || (d.negative && d.sum == 0 && kind != 'f'))) {
                reader->status = READ_NOT_PLAIN; /* more than int64 is read as, or -0 among integers */
                return NULL;
            }
            if (d.whole && kind != 'f') {
                ((int64_t *)reader->outs[c])[row] = d.negative ? -(int64_t)d.sum : (int64_t)d.sum;
                if (kind == '?') reader->kinds[c] = 'i';
                return q;
            }
            if (kind != 'f') star_numbers(reader, c);
            if (!star_double(p, q, &d, (double *)reader->outs[c] + row)) {
                reader->status = READ_NOT_PLAIN;
                return NULL;
            }
            return q;
        }
    }
    StarValue value;
    const uint8_t *q = p;
    if (star_value(&q, end, &value) <= 0) {
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    int class = star_class(&value);
    if (class == STAR_NA) {
        if (kind != 'f') star_numbers(reader, c);
        ((double *)reader->outs[c])[reader->row + reader->rows] = NAN;
        return q;
    }
    if (class != STAR_TEXT || kind != '?') {
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    reader->kinds[c] = 't';
    if (!star_text_add(reader->texts + c, value.start, value.length)) {
        reader->status = READ_NO_MEMORY;
        return NULL;
    }
    return q;
}

/* Reads the value of text [p, q) into column c: q, or NULL (the status set). */
static inline const uint8_t *star_add_text(StarReader *reader, const uint8_t *p, const uint8_t *q, Py_ssize_t c) {
    const uint8_t *s = p;
    while (s < q && !(star_bytes[*s] & SB_TEXT)) s++;
    size_t n = (size_t)(q - p);
    if (s == q || star_class(&(StarValue){p, n, SB_TEXT}) != STAR_TEXT) { /* a number, NaN, a boolean */
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    if (!star_text_add(reader->texts + c, p, n)) {
        reader->status = READ_NO_MEMORY;
        return NULL;
    }
    return q;
}

/* Reads a value of text at p into column c: its end, or NULL (the status set). */
static inline const uint8_t *star_read_text(StarReader *reader, const uint8_t *p, Py_ssize_t c) {
    const uint8_t *q = star_value_end(p, reader->end);
    if (q < reader->end && !(star_bytes[*q] & SB_AFTER)) {
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    return star_add_text(reader, p, q, c);
}

/* Passes over the value at p of a skipped column: its end, or NULL (the status set) where it is not plain. */
static inline const uint8_t *star_skip(StarReader *reader, const uint8_t *p) {
    const uint8_t *q = star_value_end(p, reader->end);
    if (q < reader->end && !(star_bytes[*q] & SB_AFTER)) {
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    return q;
}

/* Past the spaces at p (RELION pads its numbers with them), 8 at a time where 8 bytes can be read. */
static inline const uint8_t *star_spaces(const uint8_t *p, const uint8_t *e) {
    if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
        for (; e - p >= 8; p += 8) {
            uint64_t word;
            memcpy(&word, p, 8);
            word ^= 0x2020202020202020ull; /* a byte of a space is 0 */
            if (word) return p + (__builtin_ctzll(word) >> 3);
        }
    while (p < e && *p == ' ') p++;
    return p;
}

#ifdef __SSE2__
#define STAR_LINE_BLOCKS 32 /* a line of up to 32 blocks of 64 bytes is read by star_indexed_line */

/* Of the 64 bytes from p, a bit each (the first the lowest): in *separators the spaces and tabs, in
 * *lines the line ends, in *others what is neither those nor a byte of a value (other controls, CR,
 * '#', quotes, bytes from 0x7f). */
static inline void star_block_bits(const uint8_t *p, uint64_t *separators, uint64_t *lines, uint64_t *others) {
    const __m128i space = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'), line = _mm_set1_epi8('\n'),
                  delete = _mm_set1_epi8(0x7f), hash = _mm_set1_epi8('#'), quote = _mm_set1_epi8('"'),
                  apostrophe = _mm_set1_epi8('\'');
    uint64_t gaps = 0, ends = 0, taken = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + 16 * i));
        __m128i gap = _mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, tab));
        __m128i refused = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, delete), _mm_cmpeq_epi8(v, hash)),
                                       _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, apostrophe)));
        __m128i value = _mm_andnot_si128(refused, _mm_cmpgt_epi8(v, space)); /* signed: 0x80 on are below */
        gaps |= (uint64_t)(unsigned)_mm_movemask_epi8(gap) << (16 * i);
        ends |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, line)) << (16 * i);
        taken |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(gap, value)) << (16 * i);
    }
    *separators = gaps, *lines = ends, *others = ~(taken | ends);
}

/* Reads the line at p where it is plain: values and spaces or tabs up to its LF (or CRLF), in at most
 * STAR_LINE_BLOCKS blocks of 64 bytes that lie before the reader's end. Its values are found by the
 * bits of its blocks, not byte after byte, and only those of columns read are looked at. Returns the
 * start of the next line; p where the line is not such (nothing read of it: star_read_rows reads it
 * byte by byte); or NULL (the status set). */
static const uint8_t *star_indexed_line(StarReader *reader, const uint8_t *p, Py_ssize_t row) {
    uint64_t gaps[STAR_LINE_BLOCKS];
    int blocks = 0;
    size_t length = 0; /* of the line before its line end */
    for (;;) {
        const uint8_t *w = p + 64 * blocks;
        if (blocks == STAR_LINE_BLOCKS || reader->end - w < 64) return p;
        uint64_t lines, others;
        star_block_bits(w, gaps + blocks, &lines, &others);
        uint64_t line = lines & -lines, inside = line ? line - 1 : ~0ull; /* the bytes before the line end */
        uint64_t cr = line >> 1; /* the byte before the LF in this block: where it is CR, a separator */
        if (cr && w[__builtin_ctzll(cr)] == '\r') others &= ~cr, gaps[blocks] |= cr;
        if (others & inside) return p;
        blocks++;
        if (line) {
            length = 64 * (size_t)(blocks - 1) + (size_t)__builtin_ctzll(line);
            gaps[blocks - 1] |= ~inside; /* past the line: a separator, which ends its last value */
            break;
        }
    }
    char *const kinds = reader->kinds;
    uint8_t *const *const outs = reader->outs;
    Py_ssize_t c = 0, columns = reader->columns;
    const uint8_t *begun = NULL; /* a value begun in a block before this one, not ended there */
    uint64_t before = 1;         /* the line's start is as after a separator */
    for (int b = 0; b < blocks; b++) {
        const uint8_t *w = p + 64 * b;
        uint64_t shifted = gaps[b] << 1 | before;
        uint64_t starts = ~gaps[b] & shifted, ends = gaps[b] & ~shifted; /* a value's first byte, its end */
        before = gaps[b] >> 63;
        for (; ends; ends &= ends - 1) { /* each end the next start's (or the begun value's), in turn */
            const uint8_t *value = begun, *at = w + __builtin_ctzll(ends);
            if (value == NULL) {
                value = w + __builtin_ctzll(starts);
                starts &= starts - 1;
            }
            begun = NULL;
            if (c == columns) {
                reader->status = READ_NOT_PLAIN;
                return NULL;
            }
            if (c == 0 && reader->rows == reader->room) {
                reader->status = READ_FULL;
                return p;
            }
            char kind = kinds[c];
            const uint8_t *q = kind == 's'   ? at
                               : kind == 't' ? star_add_text(reader, value, at, c)
                                             : star_read_value(reader, kinds, outs, value, c, row);
            if (q == NULL) return NULL;
            if (q != at) {
                reader->status = READ_NOT_PLAIN;
                return NULL;
            }
            c++;
        }
        if (starts) begun = w + __builtin_ctzll(starts); /* ended in a block after */
    }
    if (c != 0 && c != columns) {
        reader->status = READ_NOT_PLAIN;
        return NULL;
    }
    reader->rows += c > 0, reader->lines++;
    return p + length + 1;
}
#endif

static void *star_read_rows(void *argument) {
    StarReader *reader = argument;
    const uint8_t *p = reader->p, *end = reader->end;
    Py_ssize_t columns = reader->columns;
    char *const kinds = reader->kinds;
    uint8_t *const *const outs = reader->outs;
    while (p < end) {
        Py_ssize_t row = reader->row + reader->rows;
        if (star_block(p, end)) {
            reader->status = READ_BLOCK;
            break;
        }
#ifdef __SSE2__
        const uint8_t *next = star_indexed_line(reader, p, row);
        if (next == NULL || reader->status) break; /* at the line where its rows have no room */
        if (next != p) {
            p = next;
            continue;
        }
#endif
        const uint8_t *line = p;
        Py_ssize_t c = 0;
        while (p < end) {
            unsigned b = star_bytes[*p];
            if (b & SB_VALUE) {
                if (c == columns) {
                    reader->status = READ_NOT_PLAIN;
                    break;
                }
                if (c == 0 && reader->rows == reader->room) {
                    reader->status = READ_FULL;
                    p = line;
                    break;
                }
                p = kinds[c] == 't'   ? star_read_text(reader, p, c)
                    : kinds[c] == 's' ? star_skip(reader, p)
                                      : star_read_value(reader, kinds, outs, p, c, row);
                if (p == NULL) break;
                c++;
            } else if (b & SB_SPACE) {
                p = star_spaces(p + 1, end);
            } else if (b & SB_LINE) {
                p++;
                reader->lines++;
                break;
            } else if (b & SB_CR && p + 1 < end && p[1] == '\n') {
                p += 2;
                reader->lines++;
                break;
            } else if (b & SB_HASH) {
                for (p++; p < end && *p != '\n'; p++) {
                    b = star_bytes[*p];
                    if (!(b & (SB_VALUE | SB_SPACE | SB_HASH)) && !(b & SB_CR && p + 1 < end && p[1] == '\n')) {
                        reader->status = READ_NOT_PLAIN;
                        break;
                    }
                }
                if (reader->status) break;
            } else {
                reader->status = READ_NOT_PLAIN;
                break;
            }
        }
        if (reader->status) break;
        if (c != 0 && c != columns) {
            reader->status = READ_NOT_PLAIN;
            break;
        }
        reader->rows += c > 0;
    }
    reader->p = p;
    return NULL;
}

/* The texts a reader read of the columns of text (`kinds`) as (rows, offsets, data) in `lists`, the
 * memory then theirs: 0, or -1 with the error set. */
static int star_hand_texts(StarText *texts, const char *kinds, Py_ssize_t columns, PyObject *lists) {
    for (Py_ssize_t c = 0, t = 0; c < columns; c++) {
        if (kinds[c] != 't') continue;
        StarText *text = texts + c;
        PyObject *list = PyList_GetItem(lists, t++);
        if (text->rows == 0) continue;
        StarBuffer *offsets = PyObject_New(StarBuffer, StarBufferType);
        StarBuffer *data = PyObject_New(StarBuffer, StarBufferType);
        if (offsets == NULL || data == NULL) {
            if (offsets != NULL) offsets->data = NULL, offsets->room = 0, Py_DECREF(offsets);
            if (data != NULL) data->data = NULL, data->room = 0, Py_DECREF(data);
            return -1;
        }
        size_t size = (size_t)(text->rows + 1) * sizeof(int64_t);
        star_shrink(&text->offsets, size); /* the room not taken given back */
        star_shrink(&text->data, text->size);
        offsets->data = text->offsets.data, offsets->length = (Py_ssize_t)size;
        offsets->room = text->offsets.mapped ? text->offsets.room : 0;
        data->data = text->data.data, data->length = (Py_ssize_t)text->size;
        data->room = text->data.mapped ? text->data.room : 0;
        text->offsets = text->data = (StarMemory){NULL, 0, 0};
        PyObject *part = Py_BuildValue("(nNN)", text->rows, (PyObject *)offsets, (PyObject *)data);
        if (part == NULL || PyList_Append(list, part) < 0) {
            Py_XDECREF(part);
            return -1;
        }
        Py_DECREF(part);
    }
    return 0;
}

static void star_free_texts(StarText *texts, Py_ssize_t columns) {
    for (Py_ssize_t c = 0; texts != NULL && c < columns; c++) {
        star_release(texts[c].offsets.data, texts[c].offsets.room, texts[c].offsets.mapped);
        star_release(texts[c].data.data, texts[c].data.room, texts[c].data.mapped);
    }
}

/* The line ends of [p, e), 16 bytes at a time where SSE2 is: each byte's matches counted down in a byte
 * of its own (a match is -1) for up to 255 loads, then those bytes summed. */
static Py_ssize_t star_lines(const uint8_t *p, const uint8_t *e) {
    Py_ssize_t lines = 0;
#ifdef __SSE2__
    const __m128i line = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
    while (e - p >= 16) {
        __m128i counts = zero;
        for (int n = 0; n < 255 && e - p >= 16; n++, p += 16)
            counts = _mm_sub_epi8(counts, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), line));
        __m128i sums = _mm_sad_epu8(counts, zero);
        lines += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(sums, sums));
    }
#endif
    for (; p < e; p++) lines += *p == '\n';
    return lines;
}

/* Joins the second half's rows to the first's: 1, or 0 if a column is text in one and numbers in the
 * other. The second's rows were written from the first's line ends on, which the first's rows fill
 * but for blank lines and comments: they move up onto the first's. */
static int star_join(StarReader *first, StarReader *second) {
    for (Py_ssize_t c = 0; c < first->columns; c++) {
        char a = first->kinds[c], b = second->kinds[c];
        if (a == '?' || b == '?' || a == b) {
            first->kinds[c] = a == '?' ? b : a;
        } else if ((a == 't') != (b == 't')) {
            return 0;
        } else if (a == 'i') {
            star_numbers(first, c);
        } else {
            star_numbers(second, c);
        }
        if (first->kinds[c] != 't' && first->kinds[c] != 's' && second->row != first->rows && second->rows)
            memmove(first->outs[c] + 8 * first->rows, first->outs[c] + 8 * second->row, (size_t)second->rows * 8);
    }
    first->rows += second->rows, first->lines += second->lines;
    first->p = second->p, first->status = second->status;
    return 1;
}

PyObject *vitrio_star_read(PyObject *self, PyObject *args) {
    Py_buffer text = {0};
    Py_ssize_t start, columns;
    const char *kinds_in;
    PyObject *outs, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ny#O!:star_read", &text, &start, &kinds_in, &columns, &PyTuple_Type, &outs))
        return NULL;
    Py_buffer *views = NULL;
    uint8_t **out = NULL;
    char *kinds = NULL;
    StarText *texts = NULL;
    Py_ssize_t taken = 0, room = PY_SSIZE_T_MAX;
    if (start < 0 || start > text.len || columns < 1 || columns > STAR_MAX_COLUMNS ||
        PyTuple_Size(outs) != columns) {
        PyErr_SetString(PyExc_ValueError, "start lies outside the text, or kinds and outs are not 1 to 65536 alike");
        goto done;
    }
    views = PyMem_Calloc((size_t)columns, sizeof *views);
    out = PyMem_Calloc((size_t)columns, sizeof *out);
    kinds = PyMem_Calloc((size_t)columns * 2, 1);
    texts = calloc((size_t)columns * 2, sizeof *texts);
    if (views == NULL || out == NULL || kinds == NULL || texts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; taken < columns; taken++) {
        char kind = kinds_in[taken];
        if (kind != 'i' && kind != 'f' && kind != 't' && kind != '?' && kind != 's') {
            PyErr_SetString(PyExc_ValueError, "a kind is b'i', b'f', b't', b'?' or b's'");
            goto done;
        }
        if (kind == 't' || kind == 's') continue;
        if (PyObject_GetBuffer(PyTuple_GetItem(outs, taken), views + taken, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (views[taken].len % 8 || (uintptr_t)views[taken].buf % 8) {
            PyErr_SetString(PyExc_ValueError, "outs are aligned arrays of 8-byte values");
            taken++;
            goto done;
        }
        out[taken] = views[taken].buf;
        room = views[taken].len / 8 < room ? views[taken].len / 8 : room;
    }
    memcpy(kinds, kinds_in, (size_t)columns), memcpy(kinds + columns, kinds_in, (size_t)columns);
    const uint8_t *begin = (const uint8_t *)text.buf + start, *stop = (const uint8_t *)text.buf + text.len;
    const uint8_t *half = stop, *line_end;
    if (stop - begin >= 2 * STAR_THREAD_BYTES &&
        (line_end = memchr(begin + (stop - begin) / 2, '\n', (size_t)(stop - begin - (stop - begin) / 2))))
        half = line_end + 1;
    StarReader first = {begin, half, columns, 0, room, 0, 0, kinds, out, texts, READ_ON};
    StarReader second = {half, stop, columns, 0, 0, 0, 0, kinds + columns, out, texts + columns, READ_ON};
    int apart = 0, joined = 0, plain = 1;
    Py_BEGIN_ALLOW_THREADS;
    pthread_t thread;
    if (half < stop) {
        second.row = star_lines(begin, half); /* at least the first half's rows */
        if (second.row < room) {
            first.room = second.row, second.room = room - second.row;
            apart = !pthread_create(&thread, NULL, star_read_rows, &second);
        }
        if (!apart) first.end = stop, first.room = room; /* read whole by this thread */
    }
    star_read_rows(&first);
    if (apart) {
        pthread_join(thread, NULL);
        joined = first.status == READ_ON; /* the second half's rows are the loop's too */
        if (joined) plain = star_join(&first, &second);
    }
    Py_END_ALLOW_THREADS;
    if (first.status == READ_NO_MEMORY) {
        PyErr_NoMemory();
    } else if (first.status == READ_NOT_PLAIN || !plain) {
        result = Py_NewRef(Py_None);
    } else {
        Py_ssize_t text_columns = 0;
        for (Py_ssize_t c = 0; c < columns; c++) text_columns += kinds[c] == 't';
        PyObject *lists = PyList_New(text_columns);
        for (Py_ssize_t t = 0; lists != NULL && t < text_columns; t++) {
            PyObject *list = PyList_New(0);
            if (list == NULL || PyList_SetItem(lists, t, list) < 0) Py_CLEAR(lists);
        }
        if (lists != NULL && star_hand_texts(texts, kinds, columns, lists) == 0 &&
            (!joined || star_hand_texts(texts + columns, kinds, columns, lists) == 0))
            result = Py_BuildValue("(nnny#NO)", (Py_ssize_t)(first.p - (const uint8_t *)text.buf), first.rows,
                                   first.lines, kinds, columns, PyBool_FromLong(first.status == READ_BLOCK), lists);
        Py_XDECREF(lists);
    }
done:
    for (Py_ssize_t c = 0; views != NULL && c < taken; c++)
        if (views[c].obj != NULL) PyBuffer_Release(views + c);
    star_free_texts(texts, 2 * columns);
    PyMem_Free(views), PyMem_Free(out), PyMem_Free(kinds), free(texts);
    PyBuffer_Release(&text);
    return result;
}
