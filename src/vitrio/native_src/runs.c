/* Batch reads of raw images, with no Python per image (the GIL released throughout). Its constants
 * (READ_*, RUN_*, CHECK_*) belong to vitrio/formats/_raw_layout.py, which writes the check rows and
 * reads the statuses; vitrio/_loading/_runs.py plans the runs.
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
 */
#include "native.h"

enum { BUFFER_BYTES = 1 << 18 };
static pthread_key_t buffer_key;

/* Makes the key of the threads' buffers: 1, or 0 if there is no room for it. */
int vitrio_runs_init(void) { return pthread_key_create(&buffer_key, free) == 0; }

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
        if (vitrio_bad_kinds((long)check[CHECK_FIELDS * i + CHECK_KIND], dst_kind < 0 ? K_F32 : dst_kind)) return -1;
    const int64_t *run = (const int64_t *)runs->buf;
    for (Py_ssize_t i = 0; i < runs->len / (RUN_FIELDS * 8); i++, run += RUN_FIELDS) {
        int64_t file = run[RUN_FILE], offset = run[RUN_OFFSET], count = run[RUN_COUNT], at = run[RUN_DESTINATION];
        int ok = file >= 0 && file < n_files && offset >= 0 && count >= 0 && at >= 0 && count <= (INT64_MAX >> 3);
        if (ok) {
            const int64_t *c = check + CHECK_FIELDS * file;
            int64_t bytes = count * (int64_t)vitrio_kind_size[c[CHECK_KIND] & ~SWAP];
            ok = offset <= c[CHECK_SIZE] && bytes <= c[CHECK_SIZE] - offset;
            if (dst_kind >= 0)
                ok = ok && at <= out_len && count * (int64_t)vitrio_kind_size[dst_kind] <= out_len - at;
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
    size_t size = vitrio_kind_size[src_kind & ~SWAP];
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
        vitrio_convert_into(src_kind, dst_kind, buffer, dst, m, stream);
        offset += (int64_t)(m * size), count -= (int64_t)m, dst += m * vitrio_kind_size[dst_kind];
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
    if (offset > length || count * (int64_t)vitrio_kind_size[src_kind & ~SWAP] > length - offset) return READ_CHANGED;
    vitrio_convert_into(src_kind, dst_kind, map + offset, dst, (size_t)count, stream);
    return READ_OK;
}

PyObject *vitrio_read_runs(PyObject *self, PyObject *args) {
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
    if (stream) vitrio_stream_fence();
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
    vitrio_release_views((Py_buffer *const[]){&checks, &runs, &out, NULL});
    return result;
}

PyObject *vitrio_advise(PyObject *self, PyObject *args) {
    PyObject *paths;
    Py_buffer checks = {0}, runs = {0};
    Py_ssize_t n_files;
    const char **names;
    if (!PyArg_ParseTuple(args, "O!y*y*:advise", &PyTuple_Type, &paths, &checks, &runs)) return NULL;
    if (check_runs(paths, &checks, &runs, 0, -1, &n_files, &names) < 0) {
        vitrio_release_views((Py_buffer *const[]){&checks, &runs, NULL});
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
        off_t bytes = (off_t)(r[RUN_COUNT] * (int64_t)vitrio_kind_size[kind & ~SWAP]);
        if (fd >= 0) posix_fadvise(fd, (off_t)r[RUN_OFFSET], bytes, POSIX_FADV_WILLNEED);
    }
    if (fd >= 0) close(fd);
    Py_END_ALLOW_THREADS;
    PyMem_Free(names);
    vitrio_release_views((Py_buffer *const[]){&checks, &runs, NULL});
    Py_RETURN_NONE;
}
