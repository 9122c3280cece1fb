/* What the files of vitrio._native share: the numbers of its interface, which module.c gives Python
 * as constants (the Python modules named at the top of each file own them), and the functions one
 * file defines and another calls. */
#ifndef VITRIO_NATIVE_H
#define VITRIO_NATIVE_H

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

/* eer.c */
enum { EER_OK = 0, EER_TRUNCATED = 1, EER_PAST_END = 2, EER_FULL = 3 };
enum { RENDER_U8, RENDER_U16, RENDER_U32, RENDER_F32 }; /* the kinds of render's out */
PyObject *vitrio_render(PyObject *self, PyObject *args);
PyObject *vitrio_events(PyObject *self, PyObject *args);

/* lzw.c */
PyObject *vitrio_lzw_check(PyObject *self, PyObject *args);

/* maps.c */
int vitrio_maps_init(void);
PyObject *vitrio_map_file(PyObject *self, PyObject *args);
PyObject *vitrio_advise_map(PyObject *self, PyObject *args);
PyObject *vitrio_advise_maps(PyObject *self, PyObject *args);

/* convert.c */
enum { K_U8, K_I8, K_U16, K_I16, K_F16, K_F32, K_BYTES, K_BF16, KINDS, SWAP = 256 };
extern const size_t vitrio_kind_size[KINDS];
/* Large destinations are written with non-temporal stores (x86): a batch of megabytes that the caller
 * reads later gains nothing from passing through the cache, and the stores skip reading each line
 * of the destination before writing it. */
enum { STREAM_MIN_BYTES = 4 << 20 };
void vitrio_convert_init(void);
void vitrio_convert_into(int src_kind, int dst_kind, const void *src, void *dst, size_t n, int stream);
void vitrio_stream_fence(void);
int vitrio_bad_kinds(long src_kind, long dst_kind);
PyObject *vitrio_convert(PyObject *self, PyObject *args);
PyObject *vitrio_crop(PyObject *self, PyObject *args);
PyObject *vitrio_simd(PyObject *self, PyObject *args);

/* runs.c */
enum { READ_OK = 0, READ_OPEN = 1, READ_CHANGED = 2, READ_ERROR = 3, READ_SHORT = 4 };
/* The fields of a row of runs, and of a check row. */
enum { RUN_FILE, RUN_OFFSET, RUN_COUNT, RUN_DESTINATION, RUN_FIELDS };
enum { CHECK_SIZE, CHECK_MTIME, CHECK_INODE, CHECK_DEVICE, CHECK_KIND, CHECK_FIELDS };
int vitrio_runs_init(void);
PyObject *vitrio_read_runs(PyObject *self, PyObject *args);
PyObject *vitrio_advise(PyObject *self, PyObject *args);

/* star.c */
int vitrio_star_init(void);
PyObject *vitrio_star_read(PyObject *self, PyObject *args);

/* image_names.c */
PyObject *vitrio_split_image_names(PyObject *self, PyObject *args);

/* lz4.c */
PyObject *vitrio_lz4_decode(PyObject *self, PyObject *args);

/* standardize.c */
PyObject *vitrio_standardize(PyObject *self, PyObject *args);

/* module.c */
void vitrio_release_views(Py_buffer *const *views);

/* Whether c is a decimal digit: inline, as star.c and image_names.c test every byte of a number. */
static inline int vitrio_digit(uint8_t c) { return c >= '0' && c <= '9'; }

#endif
