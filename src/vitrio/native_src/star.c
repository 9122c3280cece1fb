/* The rows of a loop of a STAR file, for vitrio/data/_star_text.py, which owns the limit of columns
 * and the kinds of columns these share with it.
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
#include "native.h"

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
    return star_locale != (locale_t)0;
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
    for (; p < e && vitrio_digit(*p); p++, digits++) sum = sum * 10 + (uint64_t)(*p - '0');
    if (p < e && *p == '.')
        for (p++; p < e && vitrio_digit(*p); p++, digits++, decimals++) sum = sum * 10 + (uint64_t)(*p - '0');
    if (digits == 0) return 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) minus = *p++ == '-';
        for (; p < e && vitrio_digit(*p); p++, exponent_digits++)
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

PyObject *vitrio_star_scan(PyObject *self, PyObject *args) {
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
                for (; ok && q < e; q++) ok = vitrio_digit(*q), number = number * 10 + (*q - '0');
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

PyObject *vitrio_star_fill(PyObject *self, PyObject *args) {
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
