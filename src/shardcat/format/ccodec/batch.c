/* The batch decoder of indexed reads (Catalog.get_many): batch_table turns a
 * batch query's rows into the decoder's table, decode_batch decodes every
 * record of the batch's read buffers in one call (records.batch_table and
 * records.decode_batch are the references). */
#include "ccodec.h"

/* batch_table(rows, wanted) -> (table, keys, spans, urls, alignments, others, seen) | None

   The rows of a batch query (url, offset, length, spans, key, alignment, kind,
   signature: reading/lookup.py's statement), as the batch decoder's input, in
   one pass: records.batch_table is the reference, and this returns None (the
   caller then runs the reference) for any row it does not expect. A row
   counts if its key is in `wanted` and no row before it had that key (equal
   hashes, another key: a collision, never a match). `table` is a bytearray of
   BATCH_ROW_SIZE-byte rows in row order (blob and at zero), `keys` and
   `spans` are per table row, `urls` and `alignments` per shard in order of
   first appearance, `others` holds (row, kind, signature) for rows whose kind
   is not NULL (not native), and `seen` maps each key found to its row. */
PyObject *py_batch_table(PyObject *self, PyObject *args)
{
    PyObject *rows, *wanted;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &rows, &PyDict_Type, &wanted))
        return NULL;
    /* The rows held: `wanted`'s lookups can run __eq__ code that changes the caller's list. */
    rows = PyList_AsTuple(rows);
    if (rows == NULL)
        return NULL;
    Py_ssize_t nrows = PyTuple_GET_SIZE(rows);
    PyObject *table = PyByteArray_FromStringAndSize(NULL, BATCH_ROW_SIZE * nrows);
    PyObject *keys = PyList_New(0), *spans = PyList_New(0), *urls = PyList_New(0), *alignments = PyList_New(0);
    PyObject *others = PyList_New(0), *seen = PyDict_New(), *shard_of = PyDict_New(), *result = NULL;
    if (!table || !keys || !spans || !urls || !alignments || !others || !seen || !shard_of)
        goto finally;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(table);
    memset(out, 0, (size_t)(BATCH_ROW_SIZE * nrows));
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < nrows; i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 8)
            goto reference;
        PyObject *url = PyTuple_GET_ITEM(row, 0), *off = PyTuple_GET_ITEM(row, 1), *len = PyTuple_GET_ITEM(row, 2),
                 *sp = PyTuple_GET_ITEM(row, 3), *key = PyTuple_GET_ITEM(row, 4), *al = PyTuple_GET_ITEM(row, 5),
                 *kind = PyTuple_GET_ITEM(row, 6);
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(url) || !PyLong_CheckExact(off) ||
            !PyLong_CheckExact(len) || !PyBytes_CheckExact(sp))
            goto reference;
        int in = PyDict_Contains(wanted, key);
        if (in < 0)
            goto finally;
        if (!in)
            continue;
        PyObject *number = PyLong_FromSsize_t(n);
        if (number == NULL)
            goto finally;
        PyObject *had = PyDict_SetDefault(seen, key, number);
        Py_DECREF(number);
        if (had == NULL)
            goto finally;
        if (had != number)
            continue; /* a key seen before: its first row counts */
        unsigned long long offset = PyLong_AsUnsignedLongLong(off), length = PyLong_AsUnsignedLongLong(len);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            goto reference;
        }
        PyObject *shard = PyDict_GetItemWithError(shard_of, url);
        if (shard == NULL) {
            if (PyErr_Occurred())
                goto finally;
            shard = PyLong_FromSsize_t(PyList_GET_SIZE(urls));
            int failed = shard == NULL || PyDict_SetItem(shard_of, url, shard) < 0 || PyList_Append(urls, url) < 0 ||
                         PyList_Append(alignments, al) < 0;
            Py_XDECREF(shard); /* shard_of holds it */
            if (failed)
                goto finally;
        }
        unsigned char *r = out + BATCH_ROW_SIZE * n;
        st32(r + 4, (uint32_t)PyLong_AsSsize_t(shard));
        st32(r + 8, (uint32_t)n);
        st64(r + 24, length);
        st64(r + 32, offset);
        if (PyList_Append(keys, key) < 0 || PyList_Append(spans, sp) < 0)
            goto finally;
        if (kind != Py_None) {
            PyObject *other = Py_BuildValue("(nOO)", n, kind, PyTuple_GET_ITEM(row, 7));
            int failed = other == NULL || PyList_Append(others, other) < 0;
            Py_XDECREF(other);
            if (failed)
                goto finally;
        }
        n++;
    }
    if (PyByteArray_Resize(table, BATCH_ROW_SIZE * n) < 0)
        goto finally;
    result = Py_BuildValue("(OOOOOOO)", table, keys, spans, urls, alignments, others, seen);
    goto finally;
reference:
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    Py_XDECREF(table);
    Py_XDECREF(keys);
    Py_XDECREF(spans);
    Py_XDECREF(urls);
    Py_XDECREF(alignments);
    Py_XDECREF(others);
    Py_XDECREF(seen);
    Py_XDECREF(shard_of);
    Py_DECREF(rows);
    return result;
}

/* decode_batch(blobs, table, keys, spans, paths, alignments, text_cache)
       -> (records, rejected)

   The batch decoder of indexed reads: one call for every record of a batch.
   `table` holds BATCH_ROW_SIZE-byte rows (spec.BATCH_ROW_DTYPE), in read
   order; row r's record is blobs[blob][at:at + length], it must hold
   keys[row] and match spans[row] (its registered spans). `records` is a list
   as long as `keys`: records[row] is the checked record, or None where this
   code did not accept it; `rejected` lists those table positions, which the
   caller hands to the reference (records.decode_batch) to raise its error. */
PyObject *py_decode_batch(PyObject *self, PyObject *args)
{
    PyObject *lists[5], *cache, *table;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!O!", &PyList_Type, &lists[0], &table, &PyList_Type, &lists[1],
                          &PyList_Type, &lists[2], &PyList_Type, &lists[3], &PyList_Type, &lists[4], &PyDict_Type,
                          &cache))
        return NULL;
    /* Every item held first: Python code (make_layout, a collection) and other
       threads (while a big record's CRCs run without the GIL) may change the
       caller's lists, and free what they held, while records are decoded. */
    PyObject *held[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int k = 0; k < 5; k++)
        if ((held[k] = PyList_AsTuple(lists[k])) == NULL)
            goto fail;
    PyObject *blobs = held[0], *keys = held[1], *spans = held[2], *paths = held[3], *alignments = held[4];
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys), nblobs = PyTuple_GET_SIZE(blobs), nshards = PyTuple_GET_SIZE(paths);
    if (PyTuple_GET_SIZE(spans) != nkeys || PyTuple_GET_SIZE(alignments) != nshards) {
        PyErr_SetString(PyExc_ValueError, "decode_batch: spans must match keys, alignments must match paths");
        goto fail;
    }
    Py_buffer tb;
    if (PyObject_GetBuffer(table, &tb, PyBUF_SIMPLE) < 0)
        goto fail;
    PyObject *out = NULL, *rejected = NULL, *minus_one = NULL, *result = NULL;
    /* An export of each blob the fast path reads (a plain, read-only view), for the whole call. */
    Py_buffer *bb = PyMem_Calloc(nblobs ? (size_t)nblobs : 1, sizeof(Py_buffer));
    if (bb == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    for (Py_ssize_t k = 0; k < nblobs; k++)
        if (hold_plain(PyTuple_GET_ITEM(blobs, k), &bb[k]) && !bb[k].readonly)
            PyBuffer_Release(&bb[k]); /* sets .obj to NULL: not read */
    if (tb.len % BATCH_ROW_SIZE) {
        PyErr_SetString(PyExc_ValueError, "decode_batch: the table is not a whole number of rows");
        goto finally;
    }
    out = PyList_New(nkeys);
    rejected = PyList_New(0);
    minus_one = PyLong_FromLong(-1);
    if (out == NULL || rejected == NULL || minus_one == NULL)
        goto finally;
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(out, i, Py_None);
    }
    Py_ssize_t rows = tb.len / BATCH_ROW_SIZE;
    for (Py_ssize_t t = 0; t < rows; t++) {
        const unsigned char *r = (const unsigned char *)tb.buf + BATCH_ROW_SIZE * t;
        uint32_t blob = ld32(r), shard = ld32(r + 4), row = ld32(r + 8);
        uint64_t at = ld64(r + 16), length = ld64(r + 24), offset = ld64(r + 32);
        if (blob >= (uint64_t)nblobs || shard >= (uint64_t)nshards || row >= (uint64_t)nkeys) {
            PyErr_Format(PyExc_ValueError, "decode_batch: table row %zd points outside the batch", t);
            goto finally;
        }
        PyObject *bv = PyTuple_GET_ITEM(blobs, blob), *key = PyTuple_GET_ITEM(keys, row);
        PyObject *al = PyTuple_GET_ITEM(alignments, shard);
        long alignment = PyLong_Check(al) ? PyLong_AsLong(al) : -1;
        if (alignment == -1 && PyErr_Occurred())
            PyErr_Clear();
        int status = 0;
        PyObject *rec = NULL;
        Py_buffer *b = &bb[blob];
        if (b->obj != NULL && alignment_ok(alignment) && length <= (uint64_t)b->len &&
            at <= (uint64_t)b->len - length && offset <= (uint64_t)LLONG_MAX) {
            const unsigned char *buf = (const unsigned char *)b->buf + at;
            PyObject *off = PyLong_FromUnsignedLongLong(offset);
            PyObject *path = PyTuple_GET_ITEM(paths, shard);
            DecodeArgs a = {alignment, Py_None, cache, 0, path, args_acyclic(Py_None, path), key};
            status = off ? decode_one(buf, (Py_ssize_t)length, bv, (Py_ssize_t)at, &a, off, minus_one, &rec) : -1;
            Py_XDECREF(off);
            if (status == 1 && !(key_matches(key, buf + HEAD_SIZE + DESC_SIZE * ld16(buf + 30), ld16(buf + 28)) &&
                                 spans_match(buf, PyTuple_GET_ITEM(spans, row)))) {
                Py_CLEAR(rec);
                status = 0;
            }
        }
        if (status < 0)
            goto finally;
        if (status == 1) {
            PyList_SetItem(out, row, rec); /* steals rec, drops the None */
            continue;
        }
        PyObject *pos = PyLong_FromSsize_t(t);
        int failed = pos == NULL || PyList_Append(rejected, pos) < 0;
        Py_XDECREF(pos);
        if (failed)
            goto finally;
    }
    result = PyTuple_Pack(2, out, rejected);
finally:
    if (bb != NULL)
        for (Py_ssize_t k = 0; k < nblobs; k++)
            PyBuffer_Release(&bb[k]); /* a no-op where none is held (.obj NULL) */
    PyMem_Free(bb);
    PyBuffer_Release(&tb);
    Py_XDECREF(out);
    Py_XDECREF(rejected);
    Py_XDECREF(minus_one);
    for (int k = 0; k < 5; k++)
        Py_XDECREF(held[k]);
    return result;
fail:
    for (int k = 0; k < 5; k++)
        Py_XDECREF(held[k]);
    return NULL;
}


