/* Streaming decode: decode_run and decode_records (the whole records of a
 * stream buffer in one call) and iter_records (the same, one record at a
 * time, as a RecordRun iterator); stream.py's record loop is the reference. */
#include "ccodec.h"

/* decode_run(view, at, stop, pos, end, alignment, index, names, text_cache,
              check_padding, path) -> ([(record view, record), ...], bytes used)

   The batch decoder of a stream: the whole records in view[at:stop], the
   first at file offset `pos`, numbered from `index`, up to file offset `end`
   (-1: no end). It stops before anything that is not a whole, sound record
   and leaves it to the caller's one-record path, which reads more or raises.
   decode_records takes the same arguments and returns the records alone
   ([record, ...], bytes used): no view and no pair per record, for readers
   that do not need each record's bytes. */
/* The length of the record at base[at:stop] (at file offset `pos`, numbered
   `index`) if it lies whole before `stop` and the file offset `end` (-1:
   none), else 0: the caller's one-record path takes over. Also 0 where the
   next file offset or index would pass LLONG_MAX (the caller counts in
   Python ints). */
static uint64_t run_length(const unsigned char *base, Py_ssize_t at, Py_ssize_t stop, long long pos,
                           long long end, long long index, uint64_t mask)
{
    if ((end >= 0 && pos >= end) || stop - at < HEAD_SIZE || index == LLONG_MAX)
        return 0;
    uint64_t length = ld64(base + at + 8);
    if (length < HEAD_SIZE || (length & mask) || (end >= 0 && length > (uint64_t)(end - pos)) ||
        (uint64_t)(stop - at) < length || length > (uint64_t)(LLONG_MAX - pos))
        return 0;
    return length;
}

static PyObject *run(PyObject *args, int pairs)
{
    PyObject *view, *names, *cache, *path;
    Py_ssize_t at, stop;
    long long pos, end, index;
    long alignment;
    int check_padding;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "OnnLLlLOO!pO", &view, &at, &stop, &pos, &end, &alignment, &index, &names,
                          &PyDict_Type, &cache, &check_padding, &path))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t start = at;
    Py_buffer b;
    if (!alignment_ok(alignment) || !hold_plain(view, &b))
        goto done; /* nothing decoded: the caller's one-record path handles it (or raises) */
    if (!b.readonly || at < 0 || stop > b.len || pos < 0) {
        PyBuffer_Release(&b);
        goto done;
    }
    const unsigned char *base = b.buf;
    DecodeArgs a = {alignment, names, cache, check_padding, path, args_acyclic(names, path), NULL, 1};
    uint64_t mask = (uint64_t)alignment - 1, length;
    while ((length = run_length(base, at, stop, pos, end, index, mask)) != 0) {
        PyObject *off = PyLong_FromLongLong(pos);
        PyObject *idx = off ? PyLong_FromLongLong(index) : NULL;
        PyObject *rec = NULL;
        int status = idx ? decode_one(base + at, (Py_ssize_t)length, view, at, &a, off, idx, &rec) : -1;
        Py_XDECREF(off);
        Py_XDECREF(idx);
        if (status == 1) {
            PyObject *item = rec;
            if (pairs) {
                PyObject *rview = PySequence_GetSlice(view, at, at + (Py_ssize_t)length);
                item = rview ? PyTuple_New(2) : NULL;
                if (item == NULL) {
                    Py_XDECREF(rview);
                    Py_DECREF(rec);
                } else {
                    PyTuple_SET_ITEM(item, 0, rview);
                    PyTuple_SET_ITEM(item, 1, rec);
                }
            }
            status = item == NULL || PyList_Append(out, item) < 0 ? -1 : 1;
            Py_XDECREF(item);
        }
        if (status < 0) {
            PyBuffer_Release(&b);
            Py_DECREF(out);
            return NULL;
        }
        if (status == 0)
            break;
        at += (Py_ssize_t)length;
        pos += (long long)length;
        index++;
    }
    PyBuffer_Release(&b);
done:
    return Py_BuildValue("(Nn)", out, at - start);
}

/* iter_records(view, at, stop, pos, end, alignment, index, names,
                 text_cache, check_padding, path) -> a RecordRun

   decode_records as an iterator: the same records, decoded one at a time as
   they are asked for, so a stream never holds a whole buffer's records at
   once. With a list per buffer, each 8 MiB buffer of 2-8 KiB records made
   ~1,300 live GC-allocated records (and as many entries), enough to run
   two young collections per buffer that walked them; one at a time, each
   record is freed (typically) before the next is made and no collection
   runs. After it stops, `used` is the bytes it consumed and `count` the
   records it yielded: the caller's one-record path takes over from there. */
typedef struct {
    PyObject_HEAD
    PyObject *view;  /* the read buffer (a read-only memoryview) */
    PyObject *names, *cache, *path;
    Py_ssize_t start, at, stop;
    long long pos, end, index;
    Py_ssize_t count;
    DecodeArgs a;
    int done;
} RecordRun;

static void runiter_dealloc(RecordRun *self)
{
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->view);
    Py_XDECREF(self->names);
    Py_XDECREF(self->cache);
    Py_XDECREF(self->path);
    PyObject_GC_Del(self);
}

static int runiter_traverse(RecordRun *self, visitproc visit, void *arg)
{
    Py_VISIT(self->view);
    Py_VISIT(self->names);
    Py_VISIT(self->cache);
    Py_VISIT(self->path);
    return 0;
}

static PyObject *runiter_next(RecordRun *self)
{
    if (self->done)
        return NULL;
    Py_ssize_t at = self->at;
    long long pos = self->pos;
    /* Held while this record is decoded: the caller may have released the
       view since the last one (then nothing more: its one-record path raises). */
    Py_buffer b;
    if (PyObject_GetBuffer(self->view, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        goto finished;
    }
    uint64_t length = b.len < self->stop ? 0
                                         : run_length(b.buf, at, self->stop, pos, self->end, self->index,
                                                      (uint64_t)self->a.alignment - 1);
    int status = 0;
    PyObject *rec = NULL;
    if (length) {
        PyObject *off = PyLong_FromLongLong(pos);
        PyObject *idx = off ? PyLong_FromLongLong(self->index) : NULL;
        status = idx ? decode_one((const unsigned char *)b.buf + at, (Py_ssize_t)length, self->view, at, &self->a,
                                  off, idx, &rec)
                     : -1;
        Py_XDECREF(off);
        Py_XDECREF(idx);
    }
    PyBuffer_Release(&b);
    if (status < 0) {
        self->done = 1;
        return NULL;
    }
    if (status == 0)
        goto finished;
    self->at = at + (Py_ssize_t)length;
    self->pos = pos + (long long)length;
    self->index++;
    self->count++;
    return rec;
finished:
    self->done = 1;
    return NULL;
}

static PyMemberDef runiter_members[] = {
    {"count", T_PYSSIZET, offsetof(RecordRun, count), READONLY, "Records yielded so far."},
    {NULL},
};

static PyObject *runiter_used(RecordRun *self, void *closure) { return PyLong_FromSsize_t(self->at - self->start); }

static PyGetSetDef runiter_getset[] = {
    {"used", (getter)runiter_used, NULL, "Bytes of the buffer consumed so far (the records yielded).", NULL},
    {NULL},
};

PyTypeObject RecordRunType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardcat.format._ccodec.RecordRun",
    .tp_basicsize = sizeof(RecordRun),
    .tp_dealloc = (destructor)runiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The whole, sound records of a stream buffer, decoded as they are asked for.",
    .tp_traverse = (traverseproc)runiter_traverse,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)runiter_next,
    .tp_members = runiter_members,
    .tp_getset = runiter_getset,
};

PyObject *py_iter_records(PyObject *self, PyObject *args)
{
    PyObject *view, *names, *cache, *path;
    Py_ssize_t at, stop;
    long long pos, end, index;
    long alignment;
    int check_padding;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "OnnLLlLOO!pO", &view, &at, &stop, &pos, &end, &alignment, &index, &names,
                          &PyDict_Type, &cache, &check_padding, &path))
        return NULL;
    RecordRun *it = PyObject_GC_New(RecordRun, &RecordRunType);
    if (it == NULL)
        return NULL;
    Py_INCREF(view);
    Py_INCREF(names);
    Py_INCREF(cache);
    Py_INCREF(path);
    it->view = view;
    it->names = names;
    it->cache = cache;
    it->path = path;
    it->start = it->at = at;
    it->stop = stop;
    it->pos = pos;
    it->end = end;
    it->index = index;
    it->count = 0;
    it->done = 0;
    /* Anything the fast path does not handle yields nothing: the caller's
       one-record path handles it (as decode_records). */
    Py_buffer b;
    int plain = alignment_ok(alignment) && hold_plain(view, &b);
    if (plain) {
        plain = b.readonly && at >= 0 && stop <= b.len && pos >= 0;
        PyBuffer_Release(&b); /* each record holds its own (runiter_next) */
    }
    if (!plain) {
        it->done = 1;
        it->a = (DecodeArgs){alignment, names, cache, check_padding, path, 0, NULL, 1};
    } else {
        it->a = (DecodeArgs){alignment, names, cache, check_padding, path, args_acyclic(names, path), NULL, 1};
    }
    PyObject_GC_Track(it);
    return (PyObject *)it;
}

PyObject *py_decode_run(PyObject *self, PyObject *args) { return run(args, 1); }

PyObject *py_decode_records(PyObject *self, PyObject *args) { return run(args, 0); }


