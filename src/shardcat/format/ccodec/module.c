/* The module: the Python objects _setup receives from recordcodec.py (and
 * the slot offsets it reads from them), the method table and PyInit. */
#include "ccodec.h"

PyObject *LazyRecord;     /* lazy.LazyRecord, a Record subclass with slots */
PyObject *make_layout;    /* lazy.make_layout(sig, specs, names) */
PyObject *EncodedRecord;  /* records.EncodedRecord (a NamedTuple) */
PyObject *CodecType;      /* spec.Codec */
PyObject *ref_decode_record, *ref_decode_indexed, *ref_encode_record;
PyObject *ref_decode_spanned; /* records.decode_spanned */
PyObject *StoredEntry;    /* entries._StoredEntry: an uncompressed entry, a view */
PyObject *CodecNone;      /* Codec.NONE */
/* The slots of LazyRecord: their member descriptors, and their offsets in
   the object (a new record's slots are written there directly). A record
   holds the shared read buffer (`_buf`, a memoryview) and where it starts in
   it (`_at`), not a view of its own. */
const char *slot_names[N_SLOTS] = {"key", "index", "offset", "length", "_buf", "_at",
                                          "_layout", "_path", "_entries", "_some", "_source"};
PyObject *slots[N_SLOTS];
Py_ssize_t slot_at[N_SLOTS];

/* The slots of _StoredEntry. */
const char *eslot_names[N_ESLOTS] = {"_raw", "_stored", "codec", "content_type"};
PyObject *eslots[N_ESLOTS];
Py_ssize_t eslot_at[N_ESLOTS];
/* lazy._SpanEntry (a _StoredEntry outside the cyclic GC; see "sealed
   entries") and its own slots `_i` and `_source`; NULL if not set up. */
PyObject *SpanEntry;
Py_ssize_t span_i_at, span_source_at;
/* entries.Record (LazyRecord's base) and the offset of its own `entries`
   slot (LazyRecord shadows it with a property): tar_record writes a plain
   record's slots in place. 0 if Record's `entries` is not such a slot. */
PyObject *RecordType;
int cpython_tricks; /* ccodec.h: set by _setup */
Py_ssize_t record_entries_at;

static PyObject *py_setup(PyObject *self, PyObject *args)
{
    PyObject *objs[8], *spanned = NULL, *span_entry = NULL;
    int tricks = 1;
    if (!PyArg_ParseTuple(args, "OOOOOOOO|OOp", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &spanned, &span_entry, &tricks))
        return NULL;
    if (LazyRecord != NULL && (tricks && SC_TRICKS_BUILT) != cpython_tricks) {
        PyErr_SetString(PyExc_RuntimeError, "_setup: the CPython tricks are chosen once, at the first set-up");
        return NULL;
    }
    /* The sealed entries' class: a subclass of StoredEntry with slots `_i` and `_source`. */
    Py_ssize_t span_at[2] = {0, 0};
    if (span_entry != NULL && span_entry != Py_None) {
        if (!PyType_Check(span_entry) || !PyType_IsSubtype((PyTypeObject *)span_entry, (PyTypeObject *)objs[7])) {
            PyErr_SetString(PyExc_TypeError, "_setup: the span entry class must subclass StoredEntry");
            return NULL;
        }
        const char *names[2] = {"_i", "_source"};
        for (int i = 0; i < 2; i++) {
            PyObject *d = PyObject_GetAttrString(span_entry, names[i]);
            int ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                     ((PyMemberDescrObject *)d)->d_common.d_type == (PyTypeObject *)span_entry;
            if (ok)
                span_at[i] = ((PyMemberDescrObject *)d)->d_member->offset;
            Py_XDECREF(d);
            if (!ok) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "_setup: span entry .%s is not a slot of its own", names[i]);
                return NULL;
            }
        }
    }
    if (!PyType_Check(objs[0]) || !PyType_Check(objs[2]) || !PyType_Check(objs[3]) || !PyType_Check(objs[7])) {
        PyErr_SetString(PyExc_TypeError, "_setup(LazyRecord, make_layout, EncodedRecord, Codec, ..., StoredEntry)");
        return NULL;
    }
    PyObject *efound[N_ESLOTS];
    for (int i = 0; i < N_ESLOTS; i++) {
        efound[i] = PyObject_GetAttrString(objs[7], eslot_names[i]);
        if (efound[i] == NULL || !Py_IS_TYPE(efound[i], &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)efound[i])->d_member->type != T_OBJECT_EX) {
            for (int j = 0; j <= i; j++)
                Py_XDECREF(efound[j]);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "StoredEntry.%s is not a slot", eslot_names[i]);
            return NULL;
        }
    }
    PyObject *none = PyObject_GetAttrString(objs[3], "NONE");
    if (none == NULL) {
        for (int j = 0; j < N_ESLOTS; j++)
            Py_DECREF(efound[j]);
        return NULL;
    }
    Py_XSETREF(CodecNone, none);
    for (int i = 0; i < N_ESLOTS; i++) {
        eslot_at[i] = ((PyMemberDescrObject *)efound[i])->d_member->offset;
        Py_XSETREF(eslots[i], efound[i]);
    }
    PyObject *found[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        found[i] = PyObject_GetAttrString(objs[0], slot_names[i]);
        if (found[i] == NULL || Py_TYPE(found[i])->tp_descr_set == NULL) {
            for (int j = 0; j <= i; j++)
                Py_XDECREF(found[j]);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "LazyRecord.%s is not a slot", slot_names[i]);
            return NULL;
        }
    }
    for (int i = 0; i < N_SLOTS; i++) {
        if (!Py_IS_TYPE(found[i], &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)found[i])->d_member->type != T_OBJECT_EX) {
            for (int j = 0; j < N_SLOTS; j++)
                Py_DECREF(found[j]);
            PyErr_Format(PyExc_TypeError, "LazyRecord.%s is not a slot of its own", slot_names[i]);
            return NULL;
        }
    }
    for (int i = 0; i < N_SLOTS; i++) {
        slot_at[i] = ((PyMemberDescrObject *)found[i])->d_member->offset;
        Py_XSETREF(slots[i], found[i]);
    }
    PyObject **targets[8] = {&LazyRecord,        &make_layout,        &EncodedRecord,     &CodecType,
                             &ref_decode_record, &ref_decode_indexed, &ref_encode_record, &StoredEntry};
    if (LazyRecord != NULL && LazyRecord != objs[0]) {
        PyErr_SetString(PyExc_RuntimeError, "_setup: LazyRecord was already set up with another class");
        return NULL;
    }
    cpython_tricks = tricks && SC_TRICKS_BUILT;
    if (cpython_tricks) {
        PyObject *getitem_method = PyDescr_NewMethod((PyTypeObject *)objs[0], &getitem_method_def);
        if (getitem_method == NULL || PyObject_SetAttrString(objs[0], "__getitem__", getitem_method) < 0) {
            Py_XDECREF(getitem_method);
            return NULL;
        }
        Py_DECREF(getitem_method);
        if (install_entry_methods((PyTypeObject *)objs[7]) < 0)
            return NULL;
        install_record_free_list((PyTypeObject *)objs[0]);
    }
    for (int i = 0; i < 8; i++) {
        Py_INCREF(objs[i]);
        Py_XSETREF(*targets[i], objs[i]);
    }
    PyTypeObject *base = ((PyTypeObject *)objs[0])->tp_base;
    PyObject *entries_slot = PyObject_GetAttrString((PyObject *)base, "entries");
    if (entries_slot == NULL)
        return NULL;
    record_entries_at = Py_IS_TYPE(entries_slot, &PyMemberDescr_Type) &&
                                ((PyMemberDescrObject *)entries_slot)->d_member->type == T_OBJECT_EX &&
                                ((PyMemberDescrObject *)entries_slot)->d_common.d_type == base
                            ? ((PyMemberDescrObject *)entries_slot)->d_member->offset
                            : 0;
    Py_DECREF(entries_slot);
    for (int i = S_KEY; i <= S_LENGTH; i++) /* the other four are Record's own slots too */
        if (((PyMemberDescrObject *)slots[i])->d_common.d_type != base)
            record_entries_at = 0;
    Py_XSETREF(RecordType, Py_NewRef((PyObject *)base));
    Py_XINCREF(spanned);
    Py_XSETREF(ref_decode_spanned, spanned);
    if (span_entry != NULL && span_entry != Py_None) {
        span_i_at = span_at[0];
        span_source_at = span_at[1];
        Py_XSETREF(SpanEntry, Py_NewRef(span_entry));
    }
    return PyBool_FromLong(cpython_tricks);
}


static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0): CRC32C of data, continuing from value."},
    {"crc32c_table", py_crc32c_table, METH_VARARGS, "CRC32C by the table fallback (for tests)."},
    {"decode_record", (PyCFunction)(void (*)(void))py_decode_record, METH_VARARGS | METH_KEYWORDS,
     "records.decode_record, compiled."},
    {"decode_indexed", (PyCFunction)(void (*)(void))py_decode_indexed, METH_VARARGS | METH_KEYWORDS,
     "records.decode_indexed, compiled."},
    {"decode_spanned", (PyCFunction)(void (*)(void))py_decode_spanned, METH_FASTCALL,
     "records.decode_spanned, compiled: the point lookup's decoder."},
#ifdef HAVE_PREAD_LINKED
    {"pread_linked", (PyCFunction)(void (*)(void))py_pread_linked, METH_FASTCALL,
     "pread_linked(fd, n, offset): bytes, or None if the file has no name left."},
    {"read_packed", py_read_packed, METH_VARARGS,
     "read_packed(fds, table, max_gap, group_bytes[, pool, pool_max]): a batch's records, read into packed "
     "buffers (with a pool: memoryviews of reused ones)."},
    {"scatter_read", py_scatter_read, METH_VARARGS,
     "scatter_read(fd, offset, dest, positions, lengths): a file's bytes read straight into pieces of dest."},
    {"scatter_read_runs", py_scatter_read_runs, METH_VARARGS,
     "scatter_read_runs(fds, offsets, counts, dest, positions, lengths): many scatter_reads in one call."},
#endif
    {"scatter_copy", py_scatter_copy, METH_VARARGS, "scatter_copy(src, dest, positions, lengths): src laid out in pieces."},
    {"gather_copy", py_gather_copy, METH_VARARGS,
     "gather_copy(sources, which, offsets, counts, dest, positions, lengths): runs of several buffers laid out in pieces."},
    {"tar_record", (PyCFunction)(void (*)(void))py_tar_record, METH_FASTCALL,
     "tar_record(data, key, specs, spans, offset, record): a tar sample's record, CRC-checked, or None."},
    {"unpack_spans", py_unpack_spans, METH_VARARGS,
     "unpack_spans(value, count): a row's spans read as the lookups read them, or None if malformed."},
    {"crc32c_spans", py_crc32c_spans, METH_VARARGS, "crc32c_spans(buf, starts, lengths): the CRC32C of each span."},
    {"decode_run", py_decode_run, METH_VARARGS, "The whole, sound records of a stream buffer."},
    {"decode_batch", py_decode_batch, METH_VARARGS, "Every record of a batch of indexed reads, in one call."},
    {"batch_table", py_batch_table, METH_VARARGS, "The rows of a batch query as the batch decoder's table."},
    {"encode_record", py_encode_record, METH_VARARGS, "records.encode_record, compiled."},
    {"add_plain", (PyCFunction)(void (*)(void))py_add_plain, METH_FASTCALL,
     "ShardWriter.add's common case, compiled: the record's index, or None for the Python path."},
    {"entry", py_entry, METH_VARARGS, "The uncompressed entry `name` of a LazyRecord (None if compressed)."},
    {"_setup", py_setup, METH_VARARGS, "Hand over the Python types and the reference functions."},
    {"decode_records", py_decode_records, METH_VARARGS, "decode_run's records alone, without their views."},
    {"iter_records", py_iter_records, METH_VARARGS, "decode_records as an iterator (a RecordRun): one record at a time."},
    {"track", py_track, METH_O, "Put a LazyRecord back under the cyclic GC."},
    {"unseal", py_unseal, METH_O, "Put a sealed entry and its record back under the cyclic GC."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ccodec", "shardcat's compiled record codec.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__ccodec(void)
{
    crc_init();
    if (PyType_Ready(&RecordRunType) < 0 || PyType_Ready(&EntrySourceType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *fn = PyCFunction_New(&getitem_def, NULL);
    PyObject *method = fn ? PyInstanceMethod_New(fn) : NULL;
    Py_XDECREF(fn);
    if (method == NULL || PyModule_AddObject(m, "record_getitem", method) < 0) {
        Py_XDECREF(method);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "CRC32C_IMPL", have_sse42 ? "sse4.2" : "table") < 0 ||
        PyModule_AddIntConstant(m, "HEAD_SIZE", HEAD_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "DESC_SIZE", DESC_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "BATCH_ROW_SIZE", BATCH_ROW_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "JOIN_LIMIT", JOIN_LIMIT) < 0 ||
        PyModule_AddIntConstant(m, "TEXT_CACHE_MAX", TEXT_CACHE_MAX) < 0 ||
        PyModule_AddIntConstant(m, "GIL_FREE_CRC", GIL_FREE_CRC) < 0 ||
        PyModule_AddIntConstant(m, "CPYTHON_TRICKS_BUILT", SC_TRICKS_BUILT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

