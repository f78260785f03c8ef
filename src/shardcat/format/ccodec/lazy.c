/* Lazy records after decoding: sealed entries (records and entries kept out
 * of the cyclic GC, and put back when Python sets anything on them), the
 * LazyRecord free list, a record's entries made on first use (entry,
 * LazyRecord.__getitem__), and _StoredEntry's len/view/data accessors that
 * module.c's _setup installs on the Python classes. */
#include "ccodec.h"

/* A record outside the cyclic GC (decode_one) makes its uncompressed entries
   outside it too: lazy._SpanEntry objects, cached in a `_some` list that is
   also untracked. A batch whose entries are read then leaves the collector
   nothing new to walk per record, where it left the record, the list and
   each entry with its memoryview (every older collection walked them all,
   and in a big heap 10,000 records a batch made full collections frequent).

   Such an entry holds its descriptor's number (`_i`) and its record's
   EntrySource (`_source`): the record's read buffer, pinned, and where the
   record starts in it. Nothing else: its view is made on first use (and
   kept: a tracked memoryview, which refers only to the read buffer, so the
   entry can still be in no cycle). A memoryview itself can never be left
   untracked: its deallocator unlinks it from the collector's list
   unconditionally. `data` and `len` read the buffer and make no view.

   All of this stays out of cycles while nobody sets anything from Python.
   Setting an attribute of an entry (_SpanEntry.__setattr__ -> unseal) or of
   the record (LazyRecord.__setattr__ -> track) tracks the entry, the record
   and its list again before the value is stored; the entry finds its record
   through the source, which holds it borrowed: retrack and the record's
   deallocator clear that pointer, so it is the live record or NULL. If the
   record dies while something else still holds its list (a copy of the
   record shares it), the list is tracked then. */

static void source_dealloc(PyObject *self)
{
    PyBuffer_Release(&((EntrySource *)self)->buf);
    PyObject_Free(self);
}

/* Not GC-tracked (no Py_TPFLAGS_HAVE_GC): it refers to a read-only buffer
   alone, which refers to nothing; not creatable from Python (no tp_new). */
PyTypeObject EntrySourceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardcat.format._ccodec.EntrySource",
    .tp_basicsize = sizeof(EntrySource),
    .tp_dealloc = source_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where a record's sealed entries read their bytes (internal).",
};

/* The record no longer needs its source to find it (tracked again, or gone). */
static void detach_source(PyObject *rec)
{
    PyObject *src = *(PyObject **)((char *)rec + slot_at[S_SOURCE]);
    if (src != NULL && Py_IS_TYPE(src, &EntrySourceType) && ((EntrySource *)src)->rec == rec)
        ((EntrySource *)src)->rec = NULL;
}

/* Track `obj` if it is an untracked list (a record's `_some`). */
static void track_list(PyObject *obj)
{
    if (obj != NULL && PyList_CheckExact(obj) && !PyObject_GC_IsTracked(obj))
        PyObject_GC_Track(obj);
}

/* A free list of LazyRecord objects. A stream makes and frees one record
   per sample; reusing the memory of the last ones freed skips the allocator
   and the generic slot walk of subtype_dealloc. Installed by _setup as
   LazyRecord's tp_dealloc only when the type's instances are exactly a GC
   header, an object header and object slots (no __dict__, no __weakref__,
   no finalizer): then every reference a record holds is one of those slots,
   and clearing them all is what subtype_dealloc would do. Instances of
   subclasses (which get subtype_dealloc of their own) never come here. */
PyObject *record_free[RECORD_FREE_MAX];
int record_free_n;
static Py_ssize_t record_nslots;       /* object slots after the header */

static void record_dealloc(PyObject *self)
{
    /* Also the base deallocator of LazyRecord's subclasses: their
       subtype_dealloc clears their own slots, then calls this (it stops at
       the first base whose tp_dealloc is not subtype_dealloc) and leaves the
       type's reference to it. What is left is LazyRecord's and Record's
       slots, the memory and that reference, as subtype_dealloc would do. */
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, record_dealloc)
    detach_source(self);
    PyObject *some = *(PyObject **)((char *)self + slot_at[S_SOME]);
    if (some != NULL && Py_REFCNT(some) > 1) /* its entry list outlives it (sealed entries) */
        track_list(some);
    PyObject **slot = (PyObject **)((char *)self + sizeof(PyObject));
    for (Py_ssize_t i = 0; i < record_nslots; i++)
        Py_CLEAR(slot[i]); /* may run other deallocators, which may use the list */
    if (tp == (PyTypeObject *)LazyRecord && record_free_n < RECORD_FREE_MAX)
        record_free[record_free_n++] = self;
    else
        PyObject_GC_Del(self);
    Py_DECREF(tp); /* an instance of a heap type holds a reference to it */
    Py_TRASHCAN_END
}

/* Install the free list if LazyRecord's layout allows it (see above). */
void install_record_free_list(PyTypeObject *tp)
{
    if (tp->tp_dealloc == record_dealloc)
        return;
    Py_ssize_t body = tp->tp_basicsize - (Py_ssize_t)sizeof(PyObject);
    if (tp->tp_itemsize != 0 || tp->tp_dictoffset != 0 || tp->tp_weaklistoffset != 0 || tp->tp_finalize != NULL ||
        tp->tp_del != NULL || body <= 0 || body % (Py_ssize_t)sizeof(PyObject *) || !PyType_IS_GC(tp))
        return;
    record_nslots = body / (Py_ssize_t)sizeof(PyObject *);
    tp->tp_dealloc = record_dealloc;
}

/* The record as a cyclic-GC-tracked object again, with its entry list,
   before it refers to anything its caller can reach or change (its entries;
   see decode_one and "sealed entries"). */
void retrack(PyObject *rec)
{
    if (!PyObject_GC_IsTracked(rec))
        PyObject_GC_Track(rec);
    track_list(*(PyObject **)((char *)rec + slot_at[S_SOME]));
    /* And the sealed record whose source this is, if another: a copy
       (copy.copy) shares its source and its entry list, and what the copy
       refers to from now on, the original reaches too. */
    PyObject *src = *(PyObject **)((char *)rec + slot_at[S_SOURCE]);
    if (src != NULL && Py_IS_TYPE(src, &EntrySourceType) && ((EntrySource *)src)->rec != NULL) {
        PyObject *owner = ((EntrySource *)src)->rec;
        ((EntrySource *)src)->rec = NULL; /* detached first: the call below ends there */
        if (owner != rec)
            retrack(owner);
    }
}


/* ------------------------------------------------------------------------ */
/* lazy entries                                                              */

/* view[start:start + size] for the plain memoryview `view`: the memoryview
   slicing makes, without the slice object and the index arithmetic a slice
   needs (a new view of the same managed buffer, narrowed as memoryview's
   own init_slice does). Any other view is sliced the ordinary way. The span
   must lie in the view (callers clamp it: clamp_span); a released view
   raises ValueError, as slicing it does. */
PyObject *subview(PyObject *view, Py_ssize_t start, Py_ssize_t size)
{
    Py_buffer *b = PyMemoryView_GET_BUFFER(view);
    if (b->ndim != 1 || b->itemsize != 1 || b->suboffsets != NULL || (b->strides && b->strides[0] != 1) ||
        b->shape == NULL)
        return PySequence_GetSlice(view, start, start + size);
    PyObject *sub = PyMemoryView_FromObject(view); /* shares the managed buffer; own shape and strides */
    if (sub == NULL)
        return NULL;
    Py_buffer *v = PyMemoryView_GET_BUFFER(sub);
    if (start < 0 || size < 0 || start > v->len - size) { /* never past the buffer, whatever a caller computed */
        Py_DECREF(sub);
        PyErr_SetString(PyExc_SystemError, "_ccodec: a sub-view outside its buffer");
        return NULL;
    }
    v->buf = (char *)v->buf + start;
    v->shape[0] = size;
    v->len = size;
    return sub;
}

/* Where buf[at + p_off : at + p_off + size] lies, sliced as Python slices
   (clamped to the buffer's `len` bytes; 0 <= at <= len): what the
   reference, lazy.LazyRecord._entry, reads for an entry. A descriptor read
   again after decoding may have changed (a bytearray's bytes can), so it is
   never trusted to lie inside the buffer. */
static void clamp_span(Py_ssize_t len, Py_ssize_t at, uint64_t p_off, uint64_t size, Py_ssize_t *start,
                       Py_ssize_t *n)
{
    uint64_t room = (uint64_t)(len - at);
    uint64_t from = p_off < room ? p_off : room;
    uint64_t to = size < room - from ? from + size : room;
    *start = at + (Py_ssize_t)from;
    *n = (Py_ssize_t)(to - from);
}

/* The source of the sealed entries of `rec`, whose read buffer is the
   memoryview `view` and which starts at `at` in it (n descriptors, inside
   the buffer: checked when decoded). NULL with no error set if the buffer
   cannot be held as it is (the entries are then made tracked). */
static PyObject *new_source(PyObject *rec, PyObject *view, Py_ssize_t at, Py_ssize_t n)
{
    EntrySource *src = PyObject_New(EntrySource, &EntrySourceType);
    if (src == NULL)
        return NULL;
    src->buf.obj = NULL;
    src->rec = rec;
    src->at = at;
    src->n = n;
    if (PyObject_GetBuffer(view, &src->buf, PyBUF_SIMPLE) < 0 || src->buf.obj != view || at < 0 ||
        src->buf.len - at < HEAD_SIZE + DESC_SIZE * n) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            Py_DECREF(src);
            return NULL;
        }
        PyErr_Clear();
        Py_DECREF(src);
        return Py_NewRef(Py_None);
    }
    return (PyObject *)src;
}

/* 1 and where the bytes of the sealed entry `entry` lie; 0 (no error) if it
   is not one, or not as the codec made it. */
static int span_of(PyObject *entry, const char **start, Py_ssize_t *size, EntrySource **source)
{
    if (SpanEntry == NULL || !PyObject_TypeCheck(entry, (PyTypeObject *)SpanEntry))
        return 0;
    PyObject *src = *(PyObject **)((char *)entry + span_source_at);
    PyObject *i_obj = *(PyObject **)((char *)entry + span_i_at);
    if (src == NULL || !Py_IS_TYPE(src, &EntrySourceType) || i_obj == NULL || !PyLong_CheckExact(i_obj))
        return 0;
    EntrySource *s = (EntrySource *)src;
    Py_ssize_t i = PyLong_AsSsize_t(i_obj);
    if (i < 0 || i >= s->n) {
        PyErr_Clear();
        return 0;
    }
    /* The descriptor lies in the buffer (new_source checked); its bytes may have changed since. */
    const unsigned char *d = (const unsigned char *)s->buf.buf + s->at + HEAD_SIZE + DESC_SIZE * i;
    Py_ssize_t from;
    clamp_span(s->buf.len, s->at, ld64(d), ld64(d + 8), &from, size);
    *start = (const char *)s->buf.buf + from;
    *source = s;
    return 1;
}

/* The view of a sealed entry, made on first use and kept as its `_raw` and
   `_stored` (as a _StoredEntry's: `e.view is e.view`). NULL with no error
   set if `entry` is not a sealed entry without a view. */
static PyObject *span_view(PyObject *entry)
{
    const char *start;
    Py_ssize_t size;
    EntrySource *s;
    if (!span_of(entry, &start, &size, &s))
        return NULL;
    PyObject *payload = subview((PyObject *)s->buf.obj, start - (const char *)s->buf.buf, size);
    if (payload == NULL)
        return NULL;
    PyObject **raw = (PyObject **)((char *)entry + eslot_at[E_RAW]);
    PyObject **stored = (PyObject **)((char *)entry + eslot_at[E_STORED]);
    Py_XSETREF(*raw, Py_NewRef(payload));
    Py_XSETREF(*stored, Py_NewRef(payload));
    return payload;
}

/* Whether `rec` makes sealed entries: a LazyRecord outside the cyclic GC,
   freed by record_dealloc (which detaches its source), not from a stream
   run or a point lookup (`_source` False). Those hand out one record at a
   time, which callers mostly drop before the next; a source would cost each
   about 4% more instructions (benchmarks/stream_instructions.py --access
   view) for little. Batches hand out thousands
   that callers keep (and ShardReader.take, through decode_indexed). */
static int seals(PyObject *rec)
{
    return SpanEntry != NULL && Py_IS_TYPE(rec, (PyTypeObject *)LazyRecord) &&
           Py_TYPE(rec)->tp_dealloc == record_dealloc && !PyObject_GC_IsTracked(rec) &&
           *(PyObject **)((char *)rec + slot_at[S_SOURCE]) != Py_False;
}

/* The error of a name the record has no entry for: Record._no_entry's
   EntryNotFoundError (a KeyError naming the record's entries), made only on
   a miss. */
static void set_no_entry(PyObject *rec, PyObject *name)
{
    PyObject *exc = PyObject_CallMethod(rec, "_no_entry", "O", name);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

/* entry(record, name) -> the uncompressed entry `name` of a LazyRecord, made
   once (lazy.LazyRecord._entry in C), or None for a compressed one, which
   LazyRecord makes itself (decompression costs far more than the call).

   Entries made are kept in the record's `_some`: a list with one place per
   descriptor (None until made), so that `rec[name] is rec[name]`. A list,
   not a dict keyed by name: the name was already looked up once in the
   layout's `where`, and a small list costs a third of a dict to make, fill
   and free, once per record a stream reads. */
static PyObject *entry_of(PyObject *rec, PyObject *name)
{
    PyObject *some = get_slot(rec, S_SOME), *layout = NULL, *view = NULL, *entry = NULL, *payload = NULL,
             *source = NULL;
    Py_ssize_t buf_at = 0;
    if (some == NULL)
        return NULL;
    layout = get_slot(rec, S_LAYOUT);
    if (layout == NULL)
        goto done;
    /* Slots set from Python may hold anything: what is not as decode_one left
       it goes to the reference (lazy.LazyRecord._entry), which raises its error. */
    if (!is_layout(layout))
        goto reference;
    PyObject *at = PyDict_GetItemWithError(PyTuple_GET_ITEM(layout, L_WHERE), name);
    if (at == NULL) {
        if (!PyErr_Occurred())
            set_no_entry(rec, name);
        goto done;
    }
    PyObject *specs = PyTuple_GET_ITEM(layout, L_SPECS);
    Py_ssize_t i = PyLong_CheckExact(at) ? PyLong_AsSsize_t(at) : -1;
    if (i < 0 || i >= PyTuple_GET_SIZE(specs)) {
        PyErr_Clear();
        goto reference;
    }
    if (some != Py_None) {
        if (!PyList_CheckExact(some) || PyList_GET_SIZE(some) != PyTuple_GET_SIZE(specs))
            goto reference;
        entry = PyList_GET_ITEM(some, i);
        if (entry != Py_None) {
            Py_INCREF(entry);
            goto done;
        }
        entry = NULL;
    }
    PyObject *spec = PyTuple_GET_ITEM(specs, i);
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3 || PyTuple_GET_ITEM(spec, 2) != CodecNone)
        goto reference; /* a compressed entry: made by the reference too */
    view = get_slot(rec, S_BUF);
    if (view == NULL)
        goto done;
    PyObject *at_obj = *(PyObject **)((char *)rec + slot_at[S_AT]);
    if (!PyMemoryView_Check(view) || at_obj == NULL || !PyLong_CheckExact(at_obj))
        goto reference;
    buf_at = PyLong_AsSsize_t(at_obj);
    if (buf_at == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    int sealed = seals(rec);
    if (sealed) {
        PyObject **src_slot = (PyObject **)((char *)rec + slot_at[S_SOURCE]);
        if (*src_slot == NULL || !Py_IS_TYPE(*src_slot, &EntrySourceType)) {
            PyObject *src = new_source(rec, view, buf_at, PyTuple_GET_SIZE(specs));
            if (src == NULL)
                goto done;
            if (src == Py_None) {
                Py_DECREF(src);
                sealed = 0;
            } else
                Py_XSETREF(*src_slot, src);
        }
        if (sealed) /* held: allocating the entry may run code that changes the record */
            source = Py_NewRef(*src_slot);
    }
    if (sealed) {
        /* No view yet: the entry knows its descriptor and its record's source. */
        entry = PyType_GenericAlloc((PyTypeObject *)SpanEntry, 0);
        if (entry == NULL)
            goto done;
        PyObject_GC_UnTrack(entry);
        PyObject *i_obj = PyLong_FromSsize_t(i);
        if (i_obj == NULL)
            goto fail;
        *(PyObject **)((char *)entry + span_i_at) = i_obj;
        *(PyObject **)((char *)entry + span_source_at) = Py_NewRef(source);
        *(PyObject **)((char *)entry + eslot_at[E_CODEC]) = Py_NewRef(CodecNone);
        *(PyObject **)((char *)entry + eslot_at[E_CTYPE]) = Py_NewRef(PyTuple_GET_ITEM(spec, 1));
    } else {
        /* A view of the buffer first: it raises ValueError if the caller released
           the buffer (as the reference does), and keeps its bytes while they are read. */
        payload = PyMemoryView_FromObject(view);
        if (payload == NULL)
            goto done;
        Py_buffer *b = PyMemoryView_GET_BUFFER(payload);
        /* The descriptor is read again: inside the buffer as it is now, or the
           reference reads it (`_at` or `_buf` may have been set from Python). */
        if (b->ndim != 1 || b->itemsize != 1 || b->suboffsets != NULL || (b->strides && b->strides[0] != 1) ||
            b->shape == NULL || buf_at < 0 || buf_at > b->len || b->len - buf_at < HEAD_SIZE + DESC_SIZE * (i + 1))
            goto reference;
        const unsigned char *d = (const unsigned char *)b->buf + buf_at + HEAD_SIZE + DESC_SIZE * i;
        Py_ssize_t from, size;
        clamp_span(b->len, buf_at, ld64(d), ld64(d + 8), &from, &size); /* its bytes may have changed too */
        b->buf = (char *)b->buf + from; /* narrowed in place, as subview does */
        b->shape[0] = size;
        b->len = size;
        entry = PyType_GenericAlloc((PyTypeObject *)StoredEntry, 0);
        if (entry == NULL)
            goto done;
        PyObject *values[N_ESLOTS] = {payload, payload, CodecNone, PyTuple_GET_ITEM(spec, 1)};
        for (int k = 0; k < N_ESLOTS; k++) { /* the empty slots of a new entry, written in place */
            Py_INCREF(values[k]);
            *(PyObject **)((char *)entry + eslot_at[k]) = values[k];
        }
    }
    if (some == Py_None) {
        Py_ssize_t n = PyTuple_GET_SIZE(specs);
        Py_DECREF(some);
        some = PyList_New(n);
        if (some == NULL)
            goto fail;
        for (Py_ssize_t k = 0; k < n; k++) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(some, k, Py_None);
        }
        if (sealed)
            PyObject_GC_UnTrack(some); /* it holds sealed entries only (see "sealed entries") */
        else
            retrack(rec); /* it is about to hold entries, which callers can change */
        if (set_slot(rec, S_SOME, some) < 0)
            goto fail;
    }
    if (!sealed) /* an ordinary entry: the list may be a sealed record's (a copy of it shares it) */
        retrack(rec);
    if (i < PyList_GET_SIZE(some)) { /* code run by the allocations above may have shrunk it */
        Py_INCREF(entry);
        Py_SETREF(PyList_GET_ITEM(some, i), entry); /* the list's own reference */
    }
    goto done;
reference:
    entry = Py_NewRef(Py_None);
    goto done;
fail:
    Py_CLEAR(entry);
done:
    Py_XDECREF(some);
    Py_XDECREF(layout);
    Py_XDECREF(view);
    Py_XDECREF(payload);
    Py_XDECREF(source);
    return entry;
}

/* _StoredEntry.__len__ and .view in C (installed by _setup): once per entry
   a stream reads, where the Python versions each cost a frame. An entry
   whose bytes are not (yet) a memoryview or bytes (a compressed one before
   its first use) takes Entry's own path. */
static PyObject *entry_view_fallback; /* Entry.view (a property) */

static PyObject *stored_view(PyObject *self)
{
    PyObject *raw = *(PyObject **)((char *)self + eslot_at[E_RAW]);
    if (raw != NULL && Py_IS_TYPE(raw, &PyMemoryView_Type)) {
        Py_INCREF(raw);
        return raw;
    }
    if (raw == NULL) {
        PyObject *view = span_view(self);
        if (view != NULL || PyErr_Occurred())
            return view;
    }
    return Py_TYPE(entry_view_fallback)->tp_descr_get(entry_view_fallback, self, (PyObject *)Py_TYPE(self));
}

/* A memoryview its owner released (memoryview.release): its fields describe freed memory. */
static inline int view_released(PyObject *view)
{
    return (((PyMemoryViewObject *)view)->flags & _Py_MEMORYVIEW_RELEASED) != 0;
}

static PyObject *stored_len(PyObject *self, PyObject *unused)
{
    PyObject *raw = *(PyObject **)((char *)self + eslot_at[E_RAW]);
    if (raw != NULL && Py_IS_TYPE(raw, &PyMemoryView_Type)) {
        if (view_released(raw)) /* the reference's raw.nbytes raises ValueError */
            return PyObject_GetAttrString(raw, "nbytes");
        return PyLong_FromSsize_t(PyMemoryView_GET_BUFFER(raw)->len);
    }
    if (raw != NULL && PyBytes_CheckExact(raw))
        return PyLong_FromSsize_t(PyBytes_GET_SIZE(raw));
    const char *start;
    Py_ssize_t size;
    EntrySource *s;
    if (raw == NULL && span_of(self, &start, &size, &s)) /* a sealed entry: no view made */
        return PyLong_FromSsize_t(size);
    PyObject *view = stored_view(self);
    if (view == NULL)
        return NULL;
    if (!PyMemoryView_Check(view)) {
        Py_DECREF(view);
        PyErr_SetString(PyExc_TypeError, "Entry.view is not a memoryview");
        return NULL;
    }
    PyObject *n = view_released(view) ? PyObject_GetAttrString(view, "nbytes")
                                      : PyLong_FromSsize_t(PyMemoryView_GET_BUFFER(view)->len);
    Py_DECREF(view);
    return n;
}

/* The getter of the `view` property: a function of the entry (METH_O). */
static PyObject *stored_view_get(PyObject *module, PyObject *entry)
{
    if (!PyObject_TypeCheck(entry, (PyTypeObject *)StoredEntry)) {
        PyErr_SetString(PyExc_TypeError, "view: not a _StoredEntry");
        return NULL;
    }
    return stored_view(entry);
}

/* The getter of the `data` property (Entry.data in C): an uncompressed
   entry's bytes copied by one PyBytes_FromStringAndSize from its view, a
   decompressed one's bytes as they are. Once per entry a batch hands out as
   bytes, where Entry.data cost a frame of its own and one of `view`. Any
   other state (not yet decompressed, a released or non-contiguous view)
   takes Entry's own path, which raises what it raises. */
static PyObject *entry_data_fallback; /* Entry.data (a property) */

static PyObject *stored_data_get(PyObject *module, PyObject *entry)
{
    if (!PyObject_TypeCheck(entry, (PyTypeObject *)StoredEntry)) {
        PyErr_SetString(PyExc_TypeError, "data: not a _StoredEntry");
        return NULL;
    }
    PyObject *raw = *(PyObject **)((char *)entry + eslot_at[E_RAW]);
    if (raw != NULL && PyBytes_CheckExact(raw)) {
        Py_INCREF(raw);
        return raw;
    }
    if (raw != NULL && Py_IS_TYPE(raw, &PyMemoryView_Type)) {
        Py_buffer b;
        if (PyObject_GetBuffer(raw, &b, PyBUF_SIMPLE) == 0) { /* C-contiguous and not released */
            PyObject *out = PyBytes_FromStringAndSize(b.buf, b.len);
            PyBuffer_Release(&b);
            return out;
        }
        PyErr_Clear();
    }
    const char *start;
    Py_ssize_t size;
    EntrySource *s;
    if (raw == NULL && span_of(entry, &start, &size, &s)) /* a sealed entry: copied, no view made */
        return PyBytes_FromStringAndSize(start, size);
    return Py_TYPE(entry_data_fallback)->tp_descr_get(entry_data_fallback, entry, (PyObject *)Py_TYPE(entry));
}

static PyMethodDef stored_len_def = {"__len__", stored_len, METH_NOARGS, "The entry's decoded size in bytes."};
static PyMethodDef stored_data_def = {"data", stored_data_get, METH_O, "The decoded bytes."};
static PyMethodDef stored_view_def = {"view", stored_view_get, METH_O,
                                      "The decoded bytes as a memoryview: zero-copy for uncompressed entries."};

/* getitem(record, name): LazyRecord.__getitem__, with no Python frame on
   the streaming hot path (installed as an instancemethod). */
PyObject *py_entry(PyObject *self, PyObject *args)
{
    PyObject *rec, *name;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "O!O", (PyTypeObject *)LazyRecord, &rec, &name))
        return NULL;
    return entry_of(rec, name);
}

static PyObject *getitem(PyObject *rec, PyObject *name)
{
    PyObject *entries = get_slot(rec, S_ENTRIES);
    if (entries == NULL)
        return NULL;
    if (entries != Py_None) { /* built whole (and perhaps changed) by the caller */
        PyObject *e = PyObject_GetItem(entries, name);
        Py_DECREF(entries);
        if (e == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            set_no_entry(rec, name);
        }
        return e;
    }
    Py_DECREF(entries);
    PyObject *e = entry_of(rec, name);
    if (e != Py_None)
        return e;
    Py_DECREF(e);
    return PyObject_CallMethod(rec, "_entry", "O", name);
}

static PyObject *py_getitem(PyObject *self, PyObject *args)
{
    PyObject *rec, *name;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "O!O", (PyTypeObject *)LazyRecord, &rec, &name))
        return NULL;
    return getitem(rec, name);
}

PyMethodDef getitem_def = {"__getitem__", py_getitem, METH_VARARGS, "The entry called `name`."};

/* The same as a method of LazyRecord itself (installed by _setup): a method
   descriptor is called with no bound method and no argument tuple, once per
   entry a stream reads. The descriptor checks that `rec` is a LazyRecord. */
static PyObject *py_getitem_method(PyObject *rec, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "__getitem__ takes one name (%zd given)", nargs);
        return NULL;
    }
    return getitem(rec, args[0]);
}

PyMethodDef getitem_method_def = {"__getitem__", (PyCFunction)(void (*)(void))py_getitem_method,
                                         METH_FASTCALL, "The entry called `name`."};


/* Keep the base class's descriptor `name` in *slot (the fallback of a C accessor). */
static int keep_base_descriptor(PyTypeObject *stored, const char *name, PyObject **slot)
{
    PyObject *fallback = PyObject_GetAttrString((PyObject *)stored->tp_base, name);
    if (fallback == NULL)
        return -1;
    if (Py_TYPE(fallback)->tp_descr_get == NULL) {
        Py_DECREF(fallback);
        PyErr_Format(PyExc_TypeError, "Entry.%s is not a descriptor", name);
        return -1;
    }
    Py_XSETREF(*slot, fallback);
    return 0;
}

/* Install `def` as the property `name` of the class. */
static int install_property(PyTypeObject *stored, const char *name, PyMethodDef *def)
{
    PyObject *fget = PyCFunction_New(def, NULL);
    PyObject *prop = fget ? PyObject_CallOneArg((PyObject *)&PyProperty_Type, fget) : NULL;
    Py_XDECREF(fget);
    if (prop == NULL || PyObject_SetAttrString((PyObject *)stored, name, prop) < 0) {
        Py_XDECREF(prop);
        return -1;
    }
    Py_DECREF(prop);
    return 0;
}

int install_entry_methods(PyTypeObject *stored)
{
    /* Entry's own view and data (the base class's, never ones installed here before). */
    if (keep_base_descriptor(stored, "view", &entry_view_fallback) < 0 ||
        keep_base_descriptor(stored, "data", &entry_data_fallback) < 0)
        return -1;
    PyObject *len = PyDescr_NewMethod(stored, &stored_len_def);
    if (len == NULL || PyObject_SetAttrString((PyObject *)stored, "__len__", len) < 0) {
        Py_XDECREF(len);
        return -1;
    }
    Py_DECREF(len);
    if (install_property(stored, "view", &stored_view_def) < 0 ||
        install_property(stored, "data", &stored_data_def) < 0)
        return -1;
    return 0;
}


/* track(record): a LazyRecord back under the cyclic GC (lazy.py calls it
   before a record refers to anything set from Python). */
PyObject *py_track(PyObject *self, PyObject *rec)
{
    if (!ready())
        return NULL;
    if (!PyObject_TypeCheck(rec, (PyTypeObject *)LazyRecord)) {
        PyErr_SetString(PyExc_TypeError, "track() takes a LazyRecord");
        return NULL;
    }
    retrack(rec);
    Py_RETURN_NONE;
}

/* unseal(entry): a sealed entry, its record and the record's entry list
   back under the cyclic GC (_SpanEntry.__setattr__ calls it first). */
PyObject *py_unseal(PyObject *self, PyObject *entry)
{
    if (SpanEntry == NULL || !PyObject_TypeCheck(entry, (PyTypeObject *)SpanEntry)) {
        PyErr_SetString(PyExc_TypeError, "unseal() takes a _SpanEntry");
        return NULL;
    }
    if (!PyObject_GC_IsTracked(entry))
        PyObject_GC_Track(entry);
    PyObject *src = *(PyObject **)((char *)entry + span_source_at);
    if (src != NULL && Py_IS_TYPE(src, &EntrySourceType) && ((EntrySource *)src)->rec != NULL)
        retrack(((EntrySource *)src)->rec); /* detaches the source: rec is NULL from here */
    Py_RETURN_NONE;
}
