/* RELION's image names split, for vitrio/data/_particles.py, which owns their use; they have no
 * constants of the interface.
 *
 *   split_image_names(offsets, data, indices, codes) -> None | list[str]
 *     Splits the names "index@path" of an Arrow string array (int64 `offsets`, rows + 1 of them, into
 *     `data`) into the index of each, counting from zero, written into `indices` (int64), and the
 *     number of its path among the distinct paths, written into `codes` (int64); returns the distinct
 *     paths, in the order they first appear. None if a name is not of 1 to 18 digits, `@` and a path
 *     of printable ASCII, or an index is 0: the general parser says what is wrong.

 */
#include "native.h"

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
        while (p < e && vitrio_digit(*p) && p - s < 18) index = index * 10 + (*p++ - '0');
        if (p == s || p == e || *p != '@' || index == 0 || ++p == e) return 0;
        int64_t start = p - codes->data, n = e - p;
        if (n != previous_n || memcmp(p, codes->data + previous_start, (size_t)n)) { /* else checked already */
            for (const uint8_t *q = p; q < e; q++)
                if (*q <= ' ' || *q >= 0x7f) return 0; /* Python's \s has more than spaces and controls */
            if ((previous = path_code(codes, start, n)) < 0) return -1;
            previous_start = start, previous_n = n;
        }
        indices[row] = index - 1, out[row] = previous;
    }
    return 1;
}

PyObject *vitrio_split_image_names(PyObject *self, PyObject *args) {
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
    vitrio_release_views((Py_buffer *const[]){&offsets, &data, &indices, &out, NULL});
    return result;
}
