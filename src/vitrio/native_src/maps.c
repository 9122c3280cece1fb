/* The memory maps the raw readers (vitrio/formats/_raw.py) copy images out of, and STAR files
 * (vitrio/data/_star_text.py) are read from; they have no constants of the interface:
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
 *   advise_map(map, ranges, done=False)
 *     Tells the kernel the ranges of a FileMap (int64 rows of offset and bytes) will be read soon
 *     (MADV_WILLNEED): what is not in the page cache is read while the copies wait for it; ranges already
 *     in memory (mincore, a MiB at a time) are not advised again. With `done`,
 *     that they were read and are not read again soon (MADV_DONTNEED): their pages leave the process's
 *     memory (the page cache keeps them, and a later read maps them again).
 *
 *   advise_maps(maps, ranges)
 *     As advise_map without `done`, of the ranges of several FileMaps at once: `ranges` are int64 rows of
 *     a map's number in the tuple `maps` (of FileMaps, and None for files not mapped, which no row may
 *     name), offset and bytes.
 */
#include "native.h"

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

/* Makes the type of maps: 1, or 0 with the error set. */
int vitrio_maps_init(void) {
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    return (FileMapType = (PyTypeObject *)PyType_FromSpec(&filemap_spec)) != NULL;
}

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

PyObject *vitrio_map_file(PyObject *self, PyObject *args) {
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

enum { RESIDENT_PAGES = 256 };

/* Tells the kernel the pages of [start, end) (start on a page) will be read soon, those of each MiB
 * that are not all in memory already: asking whether they are (mincore: the map's own page table
 * first) costs a fraction of the advice, which looks up every page in the page cache again. */
static void will_need(uintptr_t start, uintptr_t end) {
    unsigned char resident[RESIDENT_PAGES];
    while (start < end) {
        size_t length = end - start < RESIDENT_PAGES * page_size ? end - start : RESIDENT_PAGES * page_size;
        size_t pages = (length + page_size - 1) / page_size, in = 0;
        if (mincore((void *)start, length, resident) == 0)
            while (in < pages && resident[in] & 1) in++;
        if (in < pages) madvise((void *)start, length, MADV_WILLNEED);
        start += length;
    }
}

/* Checks that the ranges of the maps (int64 rows of `width`: a map's number where width is 3, then offset
 * and bytes) lie within them: 1, or 0 with the error set. */
static int ranges_within(PyObject *const *maps, Py_ssize_t count, const Py_buffer *ranges, int width) {
    const int64_t *range = (const int64_t *)ranges->buf;
    int ok = ranges->len % (8 * width) == 0;
    for (Py_ssize_t i = 0; ok && i < ranges->len / (8 * width); i++, range += width) {
        int64_t number = width == 3 ? range[0] : 0, offset = range[width - 2], bytes = range[width - 1];
        ok = number >= 0 && number < count && maps[number] != NULL && offset >= 0 && bytes >= 0;
        if (ok) {
            int64_t length = ((FileMap *)maps[number])->length;
            ok = offset <= length && bytes <= length - offset;
        }
    }
    if (!ok) PyErr_SetString(PyExc_ValueError, width == 3 ? "ranges are int64 rows (map, offset, bytes) within the maps given"
                                                          : "ranges are int64 rows (offset, bytes) within the map");
    return ok;
}

/* Advises the ranges (as ranges_within takes them), the GIL released. */
static void advise_ranges(PyObject *const *maps, const Py_buffer *ranges, int width, int done) {
    const int64_t *range = (const int64_t *)ranges->buf;
    Py_ssize_t n = ranges->len / (8 * width);
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++, range += width) {
        uint8_t *address = ((FileMap *)maps[width == 3 ? range[0] : 0])->address;
        uintptr_t start = (uintptr_t)(address + range[width - 2]), end = start + (uintptr_t)range[width - 1];
        start &= ~(uintptr_t)(page_size - 1);
        if (done) {
            if (end > start) madvise((void *)start, (size_t)(end - start), MADV_DONTNEED);
        } else {
            will_need(start, end);
        }
    }
    Py_END_ALLOW_THREADS;
}

PyObject *vitrio_advise_map(PyObject *self, PyObject *args) {
    PyObject *map;
    Py_buffer ranges = {0};
    int done = 0;
    if (!PyArg_ParseTuple(args, "O!y*|p:advise_map", FileMapType, &map, &ranges, &done)) return NULL;
    int ok = ranges_within(&map, 1, &ranges, 2);
    if (ok) advise_ranges(&map, &ranges, 2, done);
    vitrio_release_views((Py_buffer *const[]){&ranges, NULL});
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

PyObject *vitrio_advise_maps(PyObject *self, PyObject *args) {
    PyObject *maps;
    Py_buffer ranges = {0};
    if (!PyArg_ParseTuple(args, "O!y*:advise_maps", &PyTuple_Type, &maps, &ranges)) return NULL;
    Py_ssize_t count = PyTuple_Size(maps);
    PyObject **held = PyMem_Calloc((size_t)count + 1, sizeof *held);
    int ok = held != NULL;
    if (!ok) PyErr_NoMemory();
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        PyObject *map = PyTuple_GetItem(maps, i);
        held[i] = map == Py_None ? NULL : map;
        ok = map == Py_None || PyObject_TypeCheck(map, FileMapType);
        if (!ok) PyErr_SetString(PyExc_TypeError, "maps is a tuple of FileMaps and None");
    }
    ok = ok && ranges_within(held, count, &ranges, 3);
    if (ok) advise_ranges(held, &ranges, 3, 0);
    PyMem_Free(held);
    vitrio_release_views((Py_buffer *const[]){&ranges, NULL});
    if (!ok) return NULL;
    Py_RETURN_NONE;
}
