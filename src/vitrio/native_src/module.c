/* vitrio._native: what has to run without the GIL or outside Python's reach; this file holds the
 * module, its table of functions and its constants, each owned by the Python modules named at the top
 * of the file that uses it.
 *
 * - EER decoding (render, events): eer.c;
 * - a check of LZW streams before imagecodecs decodes them (lzw_check): lzw.c;
 * - file maps whose pages read as zeros instead of raising SIGBUS (map_file, advise_map): maps.c;
 * - conversions of values and crops of patches (convert, crop, simd): convert.c;
 * - batch reads of raw images (read_runs, advise): runs.c;
 * - the plain rows of the loops of STAR files (star_read): star.c;
 * - RELION's image names split (split_image_names): image_names.c;
 * - LZ4 blocks decoded (lz4_decode): lz4.c;
 * - each item of a batch standardised (standardize): standardize.c.
 *
 * The numbers of the interface (kinds, statuses, the fields of rows) are the module's constants,
 * named as in the comments of those files (native.h defines them); vitrio/_native.pyi types the
 * functions.
 */
#include "native.h"

/* Releases the views of a NULL-ended list; one never taken (all zeros) is passed over. */
void vitrio_release_views(Py_buffer *const *views) {
    for (; *views != NULL; views++) PyBuffer_Release(*views);
}

static PyMethodDef methods[] = {
    {"render", vitrio_render, METH_VARARGS, "Add the events of EER strips into an image."},
    {"events", vitrio_events, METH_VARARGS, "Write the sub-pixel positions of the events of EER strips."},
    {"lzw_check", vitrio_lzw_check, METH_VARARGS, "Find a code in a TIFF LZW segment that crashes imagecodecs."},
    {"map_file", vitrio_map_file, METH_VARARGS, "Map the start of a file; pages that cannot be read read as zeros."},
    {"read_runs", vitrio_read_runs, METH_VARARGS, "Read runs of values of files into an array, converting them."},
    {"advise", vitrio_advise, METH_VARARGS, "Tell the kernel runs of files will be read soon."},
    {"advise_map", vitrio_advise_map, METH_VARARGS, "Tell the kernel ranges of a map will be read soon, or were read."},
    {"advise_maps", vitrio_advise_maps, METH_VARARGS, "Tell the kernel ranges of several maps will be read soon."},
    {"convert", vitrio_convert, METH_VARARGS, "Convert values of one kind into another."},
    {"crop", vitrio_crop, METH_VARARGS, "Crop patches out of an image, converting them."},
    {"simd", vitrio_simd, METH_VARARGS, "Whether conversions use the processor's vector extensions (for tests)."},
    {"star_read", vitrio_star_read, METH_VARARGS, "Read the plain rows of a STAR loop into arrays in one pass."},
    {"split_image_names", vitrio_split_image_names, METH_VARARGS, "Split RELION's index@path names into indices and paths."},
    {"lz4_decode", vitrio_lz4_decode, METH_VARARGS, "Decode an LZ4 block into a buffer it fills."},
    {"standardize", vitrio_standardize, METH_VARARGS, "Give each item of a batch a mean of 0 and a deviation of 1."},
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
    if (!vitrio_star_init()) return PyErr_NoMemory();
    vitrio_convert_init();
    if (!vitrio_runs_init()) return PyErr_NoMemory();
    if (!vitrio_maps_init()) return NULL;
    PyObject *created = PyModule_Create(&module);
    for (size_t i = 0; created != NULL && i < sizeof constants / sizeof constants[0]; i++) {
        if (PyModule_AddIntConstant(created, constants[i].name, constants[i].value) < 0) Py_CLEAR(created);
    }
    return created;
}
