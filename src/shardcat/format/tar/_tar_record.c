/* tar_record: the record of a tar sample found by the point lookup,
 * format/tar/read.py's read_tar_record compiled. */
/* Linked into the record codec (format._ccodec): it builds the codec's own record objects. */
#include "../ccodec/ccodec.h"

/* tar_record(data, key, specs, spans, offset, record) -> Record | None

   format/tar/read.py's read_tar_record, compiled, for the point lookup of a
   tar sample (reading/point.py's TarFinisher calls it): `data` the
   sample's bytes (bytes), `specs` a tuple of (name, content_type) per entry
   (the layout's), `spans` the catalog row's packed (offset in the sample,
   size, CRC32C) per entry (format/spans.py, read by spans.h),
   `record` the Record class. The same record as the Python function: each
   entry a _StoredEntry whose view is a slice of one memoryview of `data`,
   index -1, the sample's offset and length.

   None wherever the Python function raises (a span past the bytes, a CRC32C
   that is not the indexed one, spans that do not fit the specs): the caller
   then hands the lookup to the Python path, which raises the typed error.
   Every CRC is checked before any object is made. */
PyObject *py_tar_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "tar_record() takes 6 arguments, %zd given", nargs);
        return NULL;
    }
    PyObject *data = args[0], *key = args[1], *specs = args[2], *spans = args[3], *offset = args[4],
             *record = args[5];
    if (!ready())
        return NULL;
    if (!PyBytes_CheckExact(data) || !PyTuple_CheckExact(specs) || !PyBytes_CheckExact(spans))
        Py_RETURN_NONE;
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    const unsigned char *sp = (const unsigned char *)PyBytes_AS_STRING(spans);
    uint64_t packed = (uint64_t)PyBytes_GET_SIZE(spans);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    uint64_t len = (uint64_t)PyBytes_GET_SIZE(data);
    SpanReader r;
    span_reader_start(&r, sp, packed, (uint64_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        Span s;
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!span_next(&r, &s) || s.offset > len || s.size > len - s.offset || !PyTuple_CheckExact(spec) ||
            PyTuple_GET_SIZE(spec) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(spec, 0)) ||
            crc32c(0, buf + s.offset, (size_t)s.size) != s.crc)
            Py_RETURN_NONE;
    }
    if (!span_reader_finished(&r))
        Py_RETURN_NONE;
    PyObject *view = PyMemoryView_FromObject(data), *entries = PyDict_New(), *out = NULL, *length = NULL,
             *minus_one = NULL;
    if (view == NULL || entries == NULL)
        goto done;
    span_reader_start(&r, sp, packed, (uint64_t)n); /* read again: every entry was checked above */
    for (Py_ssize_t i = 0; i < n; i++) {
        Span s = {0, 0, 0};
        span_next(&r, &s);
        Py_ssize_t at = (Py_ssize_t)s.offset, size = (Py_ssize_t)s.size;
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        PyObject *payload = subview(view, at, size);
        PyObject *entry = NULL;
        if (payload != NULL && cpython_tricks) {
            /* As _StoredEntry(payload, content_type, Codec.NONE): the empty slots, written in place. */
            entry = PyType_GenericAlloc((PyTypeObject *)StoredEntry, 0);
            PyObject *values[N_ESLOTS] = {payload, payload, CodecNone, PyTuple_GET_ITEM(spec, 1)};
            for (int k = 0; entry != NULL && k < N_ESLOTS; k++)
                *(PyObject **)((char *)entry + eslot_at[k]) = Py_NewRef(values[k]);
        } else if (payload != NULL) {
            PyObject *call[3] = {payload, PyTuple_GET_ITEM(spec, 1), CodecNone};
            entry = PyObject_Vectorcall(StoredEntry, call, 3, NULL);
        }
        Py_XDECREF(payload);
        if (entry == NULL)
            goto done;
        int failed = PyDict_SetItem(entries, PyTuple_GET_ITEM(spec, 0), entry);
        Py_DECREF(entry);
        if (failed < 0)
            goto done;
    }
    length = PyLong_FromSsize_t(PyBytes_GET_SIZE(data));
    minus_one = PyLong_FromLong(-1);
    if (length == NULL || minus_one == NULL)
        goto done;
    if (record == RecordType && record_entries_at > 0 && cpython_tricks) {
        /* Record(key, entries, -1, offset, length) without its __init__'s
           Python frame: the empty slots of a new record, written in place. */
        out = PyType_GenericAlloc((PyTypeObject *)RecordType, 0);
        if (out != NULL) {
            PyObject *values[5] = {key, entries, minus_one, offset, length};
            Py_ssize_t at[5] = {slot_at[S_KEY], record_entries_at, slot_at[S_INDEX], slot_at[S_OFFSET],
                                slot_at[S_LENGTH]};
            for (int k = 0; k < 5; k++)
                *(PyObject **)((char *)out + at[k]) = Py_NewRef(values[k]);
        }
        goto done;
    }
    PyObject *call[5] = {key, entries, minus_one, offset, length};
    out = PyObject_Vectorcall(record, call, 5, NULL);
done:
    Py_XDECREF(minus_one);
    Py_XDECREF(view);
    Py_XDECREF(entries);
    Py_XDECREF(length);
    return out;
}


