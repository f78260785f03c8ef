/* Decoding one record: its layout (get_layout, cached per entry names and
 * types), decode_one (a LazyRecord of a record in a read buffer, checked as
 * records.py checks it) and the entry points built on it alone:
 * decode_record, decode_indexed (ShardReader.read) and decode_spanned (the
 * point lookup's decoder). */
#include "ccodec.h"

/* Records made with these arguments may leave the cyclic GC: `names` is None
   or a frozenset of str, `path` is None or a str (see decode_one). */
int args_acyclic(PyObject *names, PyObject *path)
{
    if (!cpython_tricks) /* the plain path: every record stays under the collector */
        return 0;
    if (path != Py_None && !PyUnicode_CheckExact(path))
        return 0;
    if (names == Py_None)
        return 1;
    if (!PyFrozenSet_CheckExact(names))
        return 0;
    PyObject *it = PyObject_GetIter(names), *item;
    if (it == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = 1;
    while (ok && (item = PyIter_Next(it)) != NULL) {
        ok = PyUnicode_CheckExact(item);
        Py_DECREF(item);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        ok = 0;
    }
    return ok;
}

static int names_match(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == Py_None || b == Py_None)
        return 0;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* A cached layout as make_layout builds it (lazy.Layout): a text_cache is the
   caller's dict, and what it holds is checked before it is read. */
int is_layout(PyObject *layout)
{
    return PyTuple_Check(layout) && PyTuple_GET_SIZE(layout) == L_WHERE + 1 &&
           PyBytes_Check(PyTuple_GET_ITEM(layout, L_SIG)) && PyBytes_Check(PyTuple_GET_ITEM(layout, L_MASK)) &&
           PyTuple_Check(PyTuple_GET_ITEM(layout, L_SPECS)) && PyDict_Check(PyTuple_GET_ITEM(layout, L_WHERE));
}

/* `layout` (a new reference, given to the caller in *out) if it was made for `a->names`: 1 yes, 0 no
   (dropped), -1 error (dropped). */
static int same_names(PyObject *layout, const DecodeArgs *a, PyObject **out)
{
    int same = names_match(PyTuple_GET_ITEM(layout, L_NAMES), a->names);
    if (same == 1)
        *out = layout;
    else
        Py_DECREF(layout);
    return same;
}

/* The record's layout (entry names, types, codecs; which entries `names`
   keeps), from the cache or built. 1: found, 0: rejected (text not valid),
   -1: error. `*out` is a new reference: comparing names (__eq__) and
   replacing a cache entry can run code that changes the cache. */
static int get_layout(const unsigned char *buf, unsigned n, size_t strings_at, size_t strings_end,
                      const DecodeArgs *a, PyObject **out)
{
    size_t slen = strings_end - strings_at;
    PyObject *last = PyDict_GetItemWithError(a->cache, Py_None);
    if (last == NULL && PyErr_Occurred())
        return -1;
    if (last != NULL && is_layout(last)) {
        PyObject *sig = PyTuple_GET_ITEM(last, L_SIG);
        if ((size_t)PyBytes_GET_SIZE(sig) == 5 * (size_t)n + slen) {
            const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(sig);
            unsigned i = 0;
            /* name_length, type_length and codec are the 5 bytes at 20..25 of a descriptor. */
            while (i < n && memcmp(s + 5 * i, buf + HEAD_SIZE + DESC_SIZE * i + 20, 5) == 0)
                i++;
            if (i == n && memcmp(s + 5 * n, buf + strings_at, slen) == 0) {
                int same = same_names(Py_NewRef(last), a, out);
                if (same != 0)
                    return same;
            }
        }
    }
    PyObject *sig = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(5 * (size_t)n + slen));
    if (sig == NULL)
        return -1;
    unsigned char *s = (unsigned char *)PyBytes_AS_STRING(sig);
    for (unsigned i = 0; i < n; i++)
        memcpy(s + 5 * i, buf + HEAD_SIZE + DESC_SIZE * i + 20, 5);
    memcpy(s + 5 * n, buf + strings_at, slen);
    PyObject *layout = PyDict_GetItemWithError(a->cache, sig);
    if (layout != NULL && is_layout(layout)) {
        int same = same_names(Py_NewRef(layout), a, &layout);
        if (same < 0) {
            Py_DECREF(sig);
            return -1;
        }
        if (same == 1) {
            Py_DECREF(sig);
            if (PyDict_SetItem(a->cache, Py_None, layout) < 0) {
                Py_DECREF(layout);
                return -1;
            }
            *out = layout;
            return 1;
        }
    } else if (layout == NULL && PyErr_Occurred()) {
        Py_DECREF(sig);
        return -1;
    }
    /* Not seen yet: decode the texts once. */
    PyObject *specs = PyTuple_New(n);
    if (specs == NULL) {
        Py_DECREF(sig);
        return -1;
    }
    size_t pos = strings_at;
    int status = 1;
    for (unsigned i = 0; i < n && status == 1; i++) {
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        size_t name_len = ld16(d + 20), type_len = ld16(d + 22);
        PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + pos, (Py_ssize_t)name_len, NULL);
        PyObject *ctype = name ? PyUnicode_DecodeASCII((const char *)buf + pos + name_len,
                                                       (Py_ssize_t)type_len, NULL)
                               : NULL;
        PyObject *code = ctype ? PyLong_FromLong(d[24]) : NULL;
        PyObject *codec = code ? PyObject_CallOneArg(CodecType, code) : NULL;
        PyObject *spec = codec ? PyTuple_Pack(3, name, ctype, codec) : NULL;
        Py_XDECREF(name);
        Py_XDECREF(ctype);
        Py_XDECREF(code);
        Py_XDECREF(codec);
        if (spec == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                status = 0;
            } else {
                status = -1;
            }
            break;
        }
        PyTuple_SET_ITEM(specs, i, spec);
        pos += name_len + type_len;
    }
    if (status != 1) {
        Py_DECREF(sig);
        Py_DECREF(specs);
        return status;
    }
    layout = PyObject_CallFunctionObjArgs(make_layout, sig, specs, a->names, NULL);
    Py_DECREF(specs);
    if (layout != NULL && !is_layout(layout)) {
        Py_DECREF(layout);
        PyErr_SetString(PyExc_TypeError, "make_layout returned something other than a Layout");
        layout = NULL;
    }
    if (layout == NULL) {
        Py_DECREF(sig);
        return -1;
    }
    if (PyDict_GET_SIZE(a->cache) >= TEXT_CACHE_MAX)
        PyDict_Clear(a->cache);
    int err = PyDict_SetItem(a->cache, sig, layout) < 0 || PyDict_SetItem(a->cache, Py_None, layout) < 0;
    Py_DECREF(sig);
    if (err) {
        Py_DECREF(layout);
        return -1;
    }
    *out = layout;
    return 1;
}

/* The CRC32C of every kept entry's payload matches its descriptor (the
   layout was checked: every payload lies inside the record). */
static int payloads_sound(const unsigned char *buf, unsigned n, const char *kept)
{
    for (unsigned i = 0; i < n; i++) {
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        if (kept[i] && crc32c(0, buf + ld64(d), (size_t)ld64(d + 8)) != ld32(d + 16))
            return 0;
    }
    return 1;
}

/* Decode the record at buf[0:size], which lies at `at` in the read-only
   memoryview `shared` (the read buffer the record keeps, shared by every
   record read from it). 1: *out is a new LazyRecord; 0: rejected (the
   reference will say why); -1: error set. The caller holds an export of
   the bytes at buf (hold_plain) and references to every argument for the
   whole call: Python code runs here (make_layout, a collection), and other
   threads while a big record's CRCs run. */
int decode_one(const unsigned char *buf, Py_ssize_t size, PyObject *shared, Py_ssize_t at,
                      const DecodeArgs *a, PyObject *offset, PyObject *index, PyObject **out)
{
    if (size < HEAD_SIZE || memcmp(buf, RECORD_TAG, 4) != 0)
        return 0;
    uint32_t head_crc = ld32(buf + 4);
    uint64_t length = ld64(buf + 8);
    uint64_t head_length = ld32(buf + 24);
    uint64_t key_len = ld16(buf + 28);
    unsigned n = ld16(buf + 30);
    uint64_t mask = (uint64_t)a->alignment - 1;
    uint64_t strings_at = HEAD_SIZE + (uint64_t)DESC_SIZE * n;
    if (head_length < strings_at + key_len || (head_length & mask) || head_length > length ||
        (length & mask) || (uint64_t)size < length)
        return 0;
    if (crc32c(0, buf + 8, (size_t)head_length - 8) != head_crc)
        return 0;
    uint64_t pos = strings_at + key_len, expected = head_length;
    for (unsigned i = 0; i < n; i++) {
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        uint64_t p_off = ld64(d), p_size = ld64(d + 8);
        if (p_off != expected || p_size > length - p_off)
            return 0;
        uint64_t end = p_off + p_size;
        expected = (end + mask) & ~mask;
        pos += (uint64_t)ld16(d + 20) + ld16(d + 22);
        if (pos > head_length)
            return 0;
        if (a->check_padding && !all_zero(buf + end, (size_t)(expected - end)))
            return 0;
    }
    if (expected != length)
        return 0;
    if (a->check_padding && pos != head_length &&
        (head_length - pos > MAX_ZERO_PAD || !all_zero(buf + pos, (size_t)(head_length - pos))))
        return 0;
    PyObject *layout;
    int found = get_layout(buf, n, (size_t)(strings_at + key_len), (size_t)pos, a, &layout);
    if (found != 1)
        return found;
    PyObject *keep = PyTuple_GET_ITEM(layout, L_MASK);
    if (PyBytes_GET_SIZE(keep) != (Py_ssize_t)n) {
        Py_DECREF(layout);
        PyErr_SetString(PyExc_RuntimeError, "make_layout returned a bad mask");
        return -1;
    }
    const char *kept = PyBytes_AS_STRING(keep);
    int sound;
    if (length >= GIL_FREE_CRC) {
        /* The caller holds an export of the buffer (and references to what it
           borrows from lists) for the whole call: another thread may drop
           the list's reference or release the view meanwhile. */
        Py_BEGIN_ALLOW_THREADS sound = payloads_sound(buf, n, kept);
        Py_END_ALLOW_THREADS
    } else {
        sound = payloads_sound(buf, n, kept);
    }
    if (!sound) {
        Py_DECREF(layout);
        return 0;
    }
    PyObject *key;
    if (a->known_key != NULL && PyUnicode_CheckExact(a->known_key) &&
        key_matches(a->known_key, buf + strings_at, (Py_ssize_t)key_len)) {
        key = a->known_key; /* the same text: share the caller's str instead of decoding another */
        Py_INCREF(key);
    } else
        key = PyUnicode_DecodeUTF8((const char *)buf + strings_at, (Py_ssize_t)key_len, NULL);
    if (key == NULL) {
        Py_DECREF(layout);
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    PyObject *len_obj = PyLong_FromUnsignedLongLong(length);
    PyObject *at_obj = len_obj ? PyLong_FromSsize_t(at) : NULL;
    PyObject *rec = at_obj ? record_alloc() : NULL;
    if (rec != NULL) {
        init_slot(rec, S_KEY, key);
        init_slot(rec, S_INDEX, index);
        init_slot(rec, S_OFFSET, offset);
        init_slot(rec, S_LENGTH, len_obj);
        init_slot(rec, S_BUF, shared);
        init_slot(rec, S_AT, at_obj);
        init_slot(rec, S_LAYOUT, layout);
        init_slot(rec, S_PATH, a->path);
        init_slot(rec, S_ENTRIES, Py_None);
        init_slot(rec, S_SOME, Py_None);
        init_slot(rec, S_SOURCE, a->one_by_one ? Py_False : Py_None); /* False: never seals */
        /* A record leaves the cyclic GC, which would otherwise walk every
           record of a batch or a stream each time it collects an older
           generation (most of a batch's cost beyond its reads). Untracked is
           sound while the record can be in no reference cycle: it refers to
           its key and path (str), ints, its layout (made by make_layout from
           entry names, content types and Codec members; `names` holds only
           str: args_acyclic) and the shared buffer, a read-only memoryview
           of a bytes or bytearray object, which refers to nothing. Nothing
           there can refer back to a record. Its uncompressed entries are
           sealed ones, untracked too (lazy.c, "sealed entries"). It becomes
           tracked again (retrack) before it refers to anything else: a
           compressed entry (lazy.LazyRecord._entry), its entries dict, any
           attribute set from Python (LazyRecord.__setattr__) or set on one of
           its sealed entries (_SpanEntry.__setattr__). */
        PyObject *exporter = PyMemoryView_GET_BASE(shared);
        if (a->acyclic && PyUnicode_CheckExact(key) && PyLong_CheckExact(index) && PyLong_CheckExact(offset) &&
            exporter != NULL && (PyBytes_CheckExact(exporter) || PyByteArray_CheckExact(exporter)))
            PyObject_GC_UnTrack(rec);
    }
    Py_DECREF(key);
    Py_DECREF(layout);
    Py_XDECREF(len_obj);
    Py_XDECREF(at_obj);
    if (rec == NULL)
        return -1;
    *out = rec;
    return 1;
}

/* An export of `view` in *b if it is a 1-D, byte-format, contiguous
   memoryview: what the fast path handles, held for as long as the fast path
   reads it (the caller may release the view, or drop its last reference,
   whenever Python code or another thread runs). 1: held; 0: anything else,
   a released view included (no error set: the reference answers, and for a
   released view raises ValueError). */
int hold_plain(PyObject *view, Py_buffer *b)
{
    if (!PyMemoryView_Check(view))
        return 0;
    if (PyObject_GetBuffer(view, b, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (b->ndim == 1 && b->itemsize == 1 && PyBuffer_IsContiguous(b, 'C') &&
        (b->format == NULL || strcmp(b->format, "B") == 0))
        return 1;
    PyBuffer_Release(b);
    return 0;
}

/* The view the records keep (a new reference in *shared): `view` itself if
   read-only, else a read-only copy (entries must not change under the
   caller), whose export then replaces the caller's in *b. -1: error (*b
   released). */
static int hold_readonly(PyObject *view, Py_buffer *b, PyObject **shared)
{
    if (b->readonly) {
        *shared = Py_NewRef(view);
        return 0;
    }
    PyObject *copy = PyBytes_FromStringAndSize(b->buf, b->len);
    PyBuffer_Release(b);
    PyObject *ro = copy ? PyMemoryView_FromObject(copy) : NULL;
    Py_XDECREF(copy);
    if (ro == NULL || PyObject_GetBuffer(ro, b, PyBUF_SIMPLE) < 0) {
        Py_XDECREF(ro);
        return -1;
    }
    *shared = ro;
    return 0;
}


/* decode_record(view, *, path, offset, alignment, index=-1, names=None,
                 text_cache=None, check_padding=False) */
PyObject *py_decode_record(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"view", "path", "offset", "alignment", "index", "names", "text_cache", "check_padding", NULL};
    PyObject *view, *path = NULL, *offset = NULL, *alignment = NULL, *index = NULL, *names = Py_None,
                    *cache = Py_None;
    int check_padding = 0;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOOOOp", kwlist, &view, &path, &offset, &alignment,
                                     &index, &names, &cache, &check_padding))
        return NULL;
    DecodeArgs a = {0, names, cache, check_padding, path, 0};
    if (path == NULL || offset == NULL || alignment == NULL || !PyLong_Check(alignment) ||
        (cache != Py_None && !PyDict_CheckExact(cache)))
        goto reference;
    a.alignment = PyLong_AsLong(alignment);
    if (a.alignment == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    Py_buffer hb;
    if (!alignment_ok(a.alignment) || !hold_plain(view, &hb))
        goto reference;
    PyObject *shared;
    if (hold_readonly(view, &hb, &shared) < 0)
        return NULL;
    a.acyclic = args_acyclic(names, path);
    PyObject *own_cache = NULL, *minus_one = NULL, *rec = NULL;
    if (cache == Py_None)
        a.cache = own_cache = PyDict_New();
    if (index == NULL)
        index = minus_one = PyLong_FromLong(-1);
    int status = a.cache && index ? decode_one(hb.buf, hb.len, shared, 0, &a, offset, index, &rec) : -1;
    PyBuffer_Release(&hb);
    Py_DECREF(shared);
    Py_XDECREF(minus_one);
    Py_XDECREF(own_cache);
    if (status == 1)
        return rec;
    if (status < 0)
        return NULL;
reference:
    return PyObject_Call(ref_decode_record, args, kwargs);
}

/* The registered (payload offset, stored size, CRC32C) of every entry equal
   the descriptors: 1 yes, 0 no or not sure (the reference decides), -1 error. */
static int registered_match(const unsigned char *buf, PyObject *registered)
{
    unsigned n = ld16(buf + 30);
    PyObject *count = PyLong_FromLong(n);
    if (count == NULL)
        return -1;
    PyObject *expected = PyObject_CallOneArg(registered, count);
    Py_DECREF(count);
    if (expected == NULL) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) { /* the reference restates it */
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    int ok = PyList_CheckExact(expected) && PyList_GET_SIZE(expected) == (Py_ssize_t)n;
    for (unsigned i = 0; ok && i < n; i++) {
        PyObject *t = PyList_GET_ITEM(expected, i);
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        uint64_t want[3] = {ld64(d), ld64(d + 8), ld32(d + 16)};
        ok = PyTuple_CheckExact(t) && PyTuple_GET_SIZE(t) == 3;
        for (int k = 0; ok && k < 3; k++) {
            PyObject *v = PyTuple_GET_ITEM(t, k);
            ok = PyLong_CheckExact(v) && PyLong_AsUnsignedLongLong(v) == want[k];
            if (PyErr_Occurred()) {
                PyErr_Clear();
                ok = 0;
            }
        }
    }
    Py_DECREF(expected);
    return ok;
}

/* The key the index names equals the record's UTF-8 key bytes. */
int key_matches(PyObject *key, const unsigned char *raw, Py_ssize_t raw_len)
{
    const char *k;
    Py_ssize_t k_len;
    if (PyUnicode_Check(key)) {
        k = PyUnicode_AsUTF8AndSize(key, &k_len);
        if (k == NULL) { /* lone surrogates: not the record's key */
            PyErr_Clear();
            return 0;
        }
    } else if (PyBytes_Check(key)) {
        k = PyBytes_AS_STRING(key);
        k_len = PyBytes_GET_SIZE(key);
    } else {
        return 0;
    }
    return k_len == raw_len && memcmp(k, raw, (size_t)raw_len) == 0;
}

/* decode_indexed(view, *, key, length, path, offset, alignment, index=-1,
                  registered=None, text_cache=None) */
PyObject *py_decode_indexed(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"view", "key", "length", "path", "offset", "alignment", "index", "registered", "text_cache", NULL};
    PyObject *view, *key = NULL, *length = NULL, *path = NULL, *offset = NULL, *alignment = NULL, *index = NULL,
                    *registered = Py_None, *cache = Py_None;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOOOOOO", kwlist, &view, &key, &length, &path, &offset,
                                     &alignment, &index, &registered, &cache))
        return NULL;
    if (key == NULL || length == NULL || path == NULL || offset == NULL || alignment == NULL ||
        !PyLong_Check(alignment) || !PyLong_Check(length) || !PyDict_CheckExact(cache))
        goto reference; /* callers on the hot path pass all of these; the rest is rare */
    DecodeArgs a = {PyLong_AsLong(alignment), Py_None, cache, 0, path, args_acyclic(Py_None, path)};
    Py_ssize_t want = PyLong_AsSsize_t(length);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    Py_buffer hb;
    if (!alignment_ok(a.alignment) || !hold_plain(view, &hb))
        goto reference;
    if (hb.len != want) {
        PyBuffer_Release(&hb);
        goto reference;
    }
    PyObject *shared, *minus_one = NULL, *rec = NULL;
    if (hold_readonly(view, &hb, &shared) < 0)
        return NULL;
    if (index == NULL)
        index = minus_one = PyLong_FromLong(-1);
    int status = index ? decode_one(hb.buf, hb.len, shared, 0, &a, offset, index, &rec) : -1;
    Py_XDECREF(minus_one);
    const unsigned char *buf = hb.buf;
    if (status == 1 && !key_matches(key, buf + HEAD_SIZE + DESC_SIZE * ld16(buf + 30), ld16(buf + 28)))
        status = 0;
    else if (status == 1 && registered != Py_None)
        status = registered_match(buf, registered); /* Python code: the export is still held */
    PyBuffer_Release(&hb);
    Py_DECREF(shared);
    if (status == 1)
        return rec;
    Py_XDECREF(rec);
    if (status < 0)
        return NULL;
reference:
    return PyObject_Call(ref_decode_indexed, args, kwargs);
}


/* The catalog's spans of a record (spans.h) equal its descriptors: 1 yes,
   0 no or not sure (the reference decides). */
int spans_match(const unsigned char *buf, PyObject *spans)
{
    if (!PyBytes_CheckExact(spans))
        return 0;
    unsigned n = ld16(buf + HEAD_ENTRY_COUNT_AT);
    SpanReader r;
    span_reader_start(&r, (const unsigned char *)PyBytes_AS_STRING(spans), (uint64_t)PyBytes_GET_SIZE(spans), n);
    for (unsigned i = 0; i < n; i++) {
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        Span sp;
        if (!span_next(&r, &sp) || sp.offset != ld64(d) || sp.size != ld64(d + 8) || sp.crc != ld32(d + 16))
            return 0;
    }
    return span_reader_finished(&r);
}

/* unpack_spans(value, count) -> [(offset, size, crc), ...] | None

   spans.h's reading of a value, for the fuzzers to compare with
   format/spans.py's unpack_spans: None where that raises. */
PyObject *py_unpack_spans(PyObject *self, PyObject *args)
{
    Py_buffer value;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &value, &count))
        return NULL;
    PyObject *out = count >= 0 && count <= 0xFFFF ? PyList_New(0) : NULL;
    if (out == NULL) {
        PyBuffer_Release(&value);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "count must be 0-65535");
        return NULL;
    }
    SpanReader r;
    span_reader_start(&r, value.buf, (uint64_t)value.len, (uint64_t)count);
    for (Py_ssize_t i = 0; i < count && out != NULL; i++) {
        Span sp;
        if (!span_next(&r, &sp)) {
            Py_CLEAR(out);
            break;
        }
        PyObject *item = Py_BuildValue("(KKI)", (unsigned long long)sp.offset, (unsigned long long)sp.size,
                                       (unsigned)sp.crc);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            PyBuffer_Release(&value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    int finished = out != NULL && span_reader_finished(&r);
    PyBuffer_Release(&value);
    if (!finished) {
        Py_XDECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* decode_spanned(view, key, length, path, offset, alignment, spans, unpack,
                  text_cache) -> record

   The point lookup's decoder (records.decode_spanned): decode_indexed with
   positional arguments (METH_FASTCALL: no keyword parsing, no argument
   tuple) and the registered spans as the catalog stores them, compared here
   (spans_match) rather than unpacked by a call back into Python. `view` is
   the record's bytes (bytes or a memoryview). Whatever this code does not
   accept, or any argument it does not expect, goes to the reference as
   given, which returns the record or raises its error. */
PyObject *py_decode_spanned(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready())
        return NULL;
    if (ref_decode_spanned == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_ccodec._setup was not given records.decode_spanned");
        return NULL;
    }
    if (nargs != 9) /* the reference raises the TypeError that names the arguments */
        goto reference;
    PyObject *view = args[0], *key = args[1], *length = args[2], *path = args[3], *offset = args[4],
             *alignment = args[5], *spans = args[6], *cache = args[8];
    if (!PyLong_CheckExact(alignment) || !PyLong_CheckExact(length) || !PyDict_CheckExact(cache) ||
        !PyBytes_CheckExact(spans) || (path != Py_None && !PyUnicode_Check(path)) || !PyCallable_Check(args[7]))
        goto reference; /* the reference's partial(unpack, spans) refuses what is not callable */
    long al = PyLong_AsLong(alignment);
    Py_ssize_t want = al == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(length);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    if (!alignment_ok(al))
        goto reference;
    Py_buffer hb;
    PyObject *shared;
    if (PyBytes_CheckExact(view)) {
        if (PyBytes_GET_SIZE(view) != want)
            goto reference;
        shared = PyMemoryView_FromObject(view); /* read-only: bytes do not change */
        if (shared == NULL)
            return NULL;
        if (PyObject_GetBuffer(view, &hb, PyBUF_SIMPLE) < 0) {
            Py_DECREF(shared);
            return NULL;
        }
    } else {
        if (!hold_plain(view, &hb))
            goto reference;
        if (hb.len != want) {
            PyBuffer_Release(&hb);
            goto reference;
        }
        if (hold_readonly(view, &hb, &shared) < 0)
            return NULL;
    }
    DecodeArgs a = {al, Py_None, cache, 0, path, args_acyclic(Py_None, path), key, 1};
    PyObject *minus_one = PyLong_FromLong(-1);
    PyObject *rec = NULL;
    int status = minus_one ? decode_one(hb.buf, hb.len, shared, 0, &a, offset, minus_one, &rec) : -1;
    Py_XDECREF(minus_one);
    if (status == 1) {
        const unsigned char *buf = hb.buf;
        if (!key_matches(key, buf + HEAD_SIZE + DESC_SIZE * ld16(buf + 30), ld16(buf + 28)) ||
            !spans_match(buf, spans)) {
            Py_CLEAR(rec);
            status = 0;
        }
    }
    PyBuffer_Release(&hb);
    Py_DECREF(shared); /* the record, if any, holds it */
    if (status == 1)
        return rec;
    if (status < 0)
        return NULL;
reference:
    return PyObject_Vectorcall(ref_decode_spanned, args, (size_t)nargs, NULL);
}


