/* Encoding: encode_record (records.encode_record compiled) and add_plain
 * (ShardWriter.add's common case: a record of bytes entries under names the
 * writer has seen, encoded and appended in one call). */
#include "ccodec.h"

typedef struct {
    PyObject *obj; /* the payload object as given */
    Py_buffer buf;
    int held;
    const char *name, *ctype;
    Py_ssize_t name_len, type_len;
    unsigned codec;
    uint32_t crc;
} EntryIn;

static int read_entry(PyObject *e, EntryIn *out)
{
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 5)
        return 0;
    PyObject *name = PyTuple_GET_ITEM(e, 0), *ctype = PyTuple_GET_ITEM(e, 1), *codec = PyTuple_GET_ITEM(e, 2),
             *payload = PyTuple_GET_ITEM(e, 3), *crc = PyTuple_GET_ITEM(e, 4);
    if (!PyBytes_Check(name) || !PyBytes_Check(ctype) || !PyLong_Check(codec) || !PyLong_Check(crc))
        return 0;
    out->name = PyBytes_AS_STRING(name);
    out->name_len = PyBytes_GET_SIZE(name);
    out->ctype = PyBytes_AS_STRING(ctype);
    out->type_len = PyBytes_GET_SIZE(ctype);
    long c = PyLong_AsLong(codec);
    unsigned long long k = PyLong_AsUnsignedLongLong(crc);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (c < 0 || c > 255 || k > 0xffffffffull || out->name_len > 0xffff || out->type_len > 0xffff)
        return 0; /* struct.pack refuses these: the reference raises its error */
    out->codec = (unsigned)c;
    out->crc = (uint32_t)k;
    if (!(PyBytes_Check(payload) || PyByteArray_Check(payload) || PyMemoryView_Check(payload)))
        return 0;
    if (PyObject_GetBuffer(payload, &out->buf, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    out->held = 1;
    if (out->buf.itemsize != 1 && !PyBytes_Check(payload)) {
        return 0; /* len() of such a memoryview counts items, not bytes */
    }
    out->obj = payload;
    return 1;
}

static PyObject *zeros(Py_ssize_t n)
{
    PyObject *z = PyBytes_FromStringAndSize(NULL, n);
    if (z)
        memset(PyBytes_AS_STRING(z), 0, (size_t)n);
    return z;
}

/* The head of a record (tag, sizes, key hash, entry descriptors, key and entry
   strings, zero padding, CRC) at h, with the payloads laid out from head_length
   on, each at the next multiple of mask + 1; each payload's offset goes to at[i]. */
static void write_head(unsigned char *h, const char *key, Py_ssize_t key_len, uint64_t khash, const EntryIn *in,
                       Py_ssize_t n, uint64_t head_length, uint64_t length, uint64_t mask, uint64_t *at)
{
    memcpy(h, RECORD_TAG, 4);
    st64(h + 8, length);
    st64(h + 16, khash);
    st32(h + 24, (uint32_t)head_length);
    st16(h + 28, (uint16_t)key_len);
    st16(h + 30, (uint16_t)n);
    unsigned char *s = h + HEAD_SIZE + DESC_SIZE * n;
    memcpy(s, key, (size_t)key_len);
    s += key_len;
    uint64_t pos = head_length;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char *d = h + HEAD_SIZE + DESC_SIZE * i;
        at[i] = pos;
        st64(d, pos);
        st64(d + 8, (uint64_t)in[i].buf.len);
        st32(d + 16, in[i].crc);
        st16(d + 20, (uint16_t)in[i].name_len);
        st16(d + 22, (uint16_t)in[i].type_len);
        d[24] = (unsigned char)in[i].codec;
        memset(d + 25, 0, 7);
        memcpy(s, in[i].name, (size_t)in[i].name_len);
        s += in[i].name_len;
        memcpy(s, in[i].ctype, (size_t)in[i].type_len);
        s += in[i].type_len;
        pos = (pos + (uint64_t)in[i].buf.len + mask) & ~mask;
    }
    memset(s, 0, (size_t)(h + head_length - s));
    st32(h + 4, crc32c(0, h + 8, (size_t)head_length - 8));
}

/* The payloads after a head written by write_head, each followed by its zero padding. */
static void write_payloads(unsigned char *h, const EntryIn *in, Py_ssize_t n, uint64_t mask, const uint64_t *at)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t end = at[i] + (uint64_t)in[i].buf.len;
        memcpy(h + at[i], in[i].buf.buf, (size_t)in[i].buf.len);
        memset(h + end, 0, (size_t)(((end + mask) & ~mask) - end));
    }
}

/* A record's head size and whole size (both multiples of mask + 1); 0 if a size overflows the format. */
static int record_sizes(Py_ssize_t key_len, const EntryIn *in, Py_ssize_t n, uint64_t mask, uint64_t *head_length,
                        uint64_t *length)
{
    uint64_t strings_len = (uint64_t)key_len;
    for (Py_ssize_t i = 0; i < n; i++)
        strings_len += (uint64_t)in[i].name_len + (uint64_t)in[i].type_len;
    uint64_t unpadded = HEAD_SIZE + (uint64_t)DESC_SIZE * (uint64_t)n + strings_len;
    *head_length = (unpadded + mask) & ~mask;
    if (*head_length > 0xffffffffull)
        return 0;
    uint64_t total = *head_length;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((uint64_t)in[i].buf.len > UINT64_MAX / 2 - total) /* the same payload many times: no wrap-around */
            return 0;
        total = (total + (uint64_t)in[i].buf.len + mask) & ~mask;
    }
    *length = total;
    return 1;
}

/* encode_record(key, key_hash, entries, alignment) -> EncodedRecord.
   The bytes are the reference's; `parts` is one bytes object for records up
   to JOIN_LIMIT (what the writer would join them into), else head, payloads
   and pads as the reference lays them out. */
PyObject *py_encode_record(PyObject *self, PyObject *args)
{
    PyObject *key, *key_hash, *entries, *alignment_obj;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "OOOO", &key, &key_hash, &entries, &alignment_obj))
        return NULL;
    if (!PyBytes_Check(key) || !PyLong_Check(key_hash) || !PyLong_Check(alignment_obj) ||
        !(PyList_CheckExact(entries) || PyTuple_CheckExact(entries)))
        return PyObject_Call(ref_encode_record, args, NULL);
    unsigned long long khash = PyLong_AsUnsignedLongLong(key_hash);
    long alignment = PyLong_AsLong(alignment_obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return PyObject_Call(ref_encode_record, args, NULL);
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(entries), key_len = PyBytes_GET_SIZE(key);
    if (!alignment_ok(alignment) || n > 0xffff || key_len > 0xffff)
        return PyObject_Call(ref_encode_record, args, NULL);
    /* The entries held (their strings and payloads are read below): allocating
       the parts can run a collection, and code that changes the caller's list. */
    entries = PySequence_Tuple(entries);
    if (entries == NULL)
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(entries);
    EntryIn *in = PyMem_Calloc((size_t)(n ? n : 1), sizeof(EntryIn));
    uint64_t *at = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    PyObject *result = NULL, *parts = NULL, *offsets = NULL, *head = NULL;
    if (in == NULL || at == NULL) {
        PyMem_Free(in);
        PyMem_Free(at);
        Py_DECREF(entries);
        return PyErr_NoMemory();
    }
    int fast = 1;
    for (Py_ssize_t i = 0; i < n && fast; i++)
        fast = read_entry(items[i], &in[i]);
    uint64_t mask = (uint64_t)alignment - 1, head_length = 0, length = 0;
    if (!fast || !record_sizes(key_len, in, n, mask, &head_length, &length)) {
        fast = 0;
        goto release;
    }
    int joined = length <= JOIN_LIMIT;
    head = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(joined ? length : head_length));
    parts = PyList_New(0);
    offsets = PyList_New(n);
    if (head == NULL || parts == NULL || offsets == NULL)
        goto release;
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(head);
    write_head(h, PyBytes_AS_STRING(key), key_len, khash, in, n, head_length, length, mask, at);
    if (joined)
        write_payloads(h, in, n, mask, at);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pos = PyLong_FromUnsignedLongLong(at[i]);
        if (pos == NULL)
            goto release;
        PyList_SET_ITEM(offsets, i, pos);
        if (joined)
            continue;
        uint64_t end = at[i] + (uint64_t)in[i].buf.len, next = (end + mask) & ~mask;
        if (PyList_Append(parts, in[i].obj) < 0)
            goto release;
        if (next != end) {
            PyObject *pad = zeros((Py_ssize_t)(next - end));
            if (pad == NULL || PyList_Append(parts, pad) < 0) {
                Py_XDECREF(pad);
                goto release;
            }
            Py_DECREF(pad);
        }
    }
    if (PyList_Insert(parts, 0, head) < 0)
        goto release;
    PyObject *fields = Py_BuildValue("(OKKO)", parts, (unsigned long long)length,
                                     (unsigned long long)head_length, offsets);
    if (fields != NULL) {
        PyObject *wrapped = PyTuple_Pack(1, fields);
        if (wrapped != NULL) { /* tuple.__new__(EncodedRecord, fields): no Python frame */
            result = PyTuple_Type.tp_new((PyTypeObject *)EncodedRecord, wrapped, NULL);
            Py_DECREF(wrapped);
        }
        Py_DECREF(fields);
    }
release:
    for (Py_ssize_t i = 0; i < n; i++)
        if (in[i].held)
            PyBuffer_Release(&in[i].buf);
    PyMem_Free(in);
    PyMem_Free(at);
    Py_XDECREF(head);
    Py_XDECREF(parts);
    Py_XDECREF(offsets);
    Py_DECREF(entries);
    if (!fast && !PyErr_Occurred())
        return PyObject_Call(ref_encode_record, args, NULL);
    return result;
}


#include "ccodec.h"

/* ------------------------------------------------------------------------ */
/* the writer's common case                                                  */

enum { W_PLAIN, W_SEEN, W_KEYS, W_ROWS, W_ENTRY_ROWS, W_BLOCK, W_BLOCK_BYTES, W_POS, W_COUNT, W_ALIGNMENT,
       W_FAILED, W_WRITE_BLOCK, W_EXTEND, N_WNAMES };
static PyObject *wnames[N_WNAMES];

static int wnames_ready(void)
{
    static const char *const strings[N_WNAMES] = {
        "_plain", "_seen", "_keys",      "_rows",  "_entry_rows",  "_block", "_block_bytes",
        "_pos",   "_count", "_alignment", "_failed", "_write_block", "extend"};
    if (wnames[N_WNAMES - 1] != NULL)
        return 1;
    for (int i = 0; i < N_WNAMES; i++)
        if (wnames[i] == NULL && (wnames[i] = PyUnicode_InternFromString(strings[i])) == NULL)
            return 0;
    return 1;
}

#define ADD_MAX_ENTRIES 64 /* more entries than this take the Python path */

/* Add `by` to writer.<attr> (an int); what it was goes to *before. */
static int bump(PyObject *writer, int attr, Py_ssize_t by, Py_ssize_t *before)
{
    PyObject *v = PyObject_GetAttr(writer, wnames[attr]);
    if (v == NULL)
        return -1;
    *before = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (*before == -1 && PyErr_Occurred())
        return -1;
    if (*before > PY_SSIZE_T_MAX - by) { /* no signed overflow: add() would make a Python int */
        PyErr_SetString(PyExc_OverflowError, "add_plain: a writer count passed PY_SSIZE_T_MAX");
        return -1;
    }
    PyObject *now = PyLong_FromSsize_t(*before + by);
    if (now == NULL)
        return -1;
    int rc = PyObject_SetAttr(writer, wnames[attr], now);
    Py_DECREF(now);
    return rc;
}

/* Call writer.<attr>.extend(values) with a tuple of n unsigned 64-bit integers. */
static int extend_rows(PyObject *writer, int attr, const uint64_t *values, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return -1;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    PyObject *rows = PyObject_GetAttr(writer, wnames[attr]);
    PyObject *r = rows ? PyObject_CallMethodOneArg(rows, wnames[W_EXTEND], t) : NULL;
    Py_XDECREF(rows);
    Py_DECREF(t);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* add_plain(writer, key, entries, key_hash, max_key_bytes, max_entries, block_bytes) -> int | None.

   ShardWriter.add's common case, compiled: an ASCII str key within the
   limit, a dict whose values are bytes under names the writer already
   stores as they are (its `_plain`: raw name, raw content type, spec id) or
   are skipped (`__` names), and a record of at most JOIN_LIMIT bytes. The
   record's bytes, rows and the order of the writer's effects are add()'s
   own. Returns None, having changed nothing, for anything else (a new
   name, another value type, a repeated key, an odd hash...): the caller
   then runs its Python path, which handles or rejects the record. */
PyObject *py_add_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "add_plain takes 7 arguments");
        return NULL;
    }
    PyObject *writer = args[0], *key = args[1], *entries = args[2], *hash_fn = args[3];
    Py_ssize_t max_key = PyLong_AsSsize_t(args[4]), max_entries = PyLong_AsSsize_t(args[5]),
               block_limit = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred() || !wnames_ready())
        return NULL;
    if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key) || !PyDict_CheckExact(entries))
        Py_RETURN_NONE;
    Py_ssize_t key_len = PyUnicode_GET_LENGTH(key);
    if (key_len == 0 || key_len > max_key || key_len > 0xffff)
        Py_RETURN_NONE;

    EntryIn in[ADD_MAX_ENTRIES];
    uint64_t at[ADD_MAX_ENTRIES], spec[ADD_MAX_ENTRIES], khash = 0, head_length = 0, length = 0;
    Py_ssize_t n = 0, pos = 0, before = 0, held = 0;
    PyObject *known_of[ADD_MAX_ENTRIES];
    PyObject *name, *value, *result = NULL, *raw_key = NULL, *rec = NULL, *h = NULL, *alignment = NULL;
    PyObject *plain = PyObject_GetAttr(writer, wnames[W_PLAIN]);
    if (plain == NULL)
        return NULL;
    if (!PyDict_CheckExact(plain))
        goto fallback;
    /* No Python code runs in this loop (exact str names looked up in a dict of exact
       str names, see ShardWriter.add), so `entries` cannot change under it. */
    while (PyDict_Next(entries, &pos, &name, &value)) {
        if (!PyUnicode_CheckExact(name))
            goto fallback;
        if (PyBytes_CheckExact(value)) {
            PyObject *known = PyDict_GetItemWithError(plain, name); /* borrowed */
            if (known == NULL) {
                if (PyErr_Occurred())
                    goto done;
                goto fallback; /* a name seen for the first time: add() prepares it */
            }
            if (n >= ADD_MAX_ENTRIES || n >= max_entries || !PyTuple_CheckExact(known) ||
                PyTuple_GET_SIZE(known) != 3)
                goto fallback;
            PyObject *raw_name = PyTuple_GET_ITEM(known, 0), *ctype = PyTuple_GET_ITEM(known, 1),
                     *sid = PyTuple_GET_ITEM(known, 2);
            if (!PyBytes_CheckExact(raw_name) || !PyBytes_CheckExact(ctype) || !PyLong_CheckExact(sid))
                goto fallback;
            EntryIn *e = &in[n];
            e->obj = value;
            e->held = 0;
            e->buf.buf = PyBytes_AS_STRING(value);
            e->buf.len = PyBytes_GET_SIZE(value);
            e->name = PyBytes_AS_STRING(raw_name);
            e->name_len = PyBytes_GET_SIZE(raw_name);
            e->ctype = PyBytes_AS_STRING(ctype);
            e->type_len = PyBytes_GET_SIZE(ctype);
            e->codec = 0; /* Codec.NONE: `_plain` holds only names stored as they are */
            long sid_value = PyLong_AsLong(sid);
            if (sid_value < 0 || e->name_len > 0xffff || e->type_len > 0xffff) {
                PyErr_Clear();
                goto fallback;
            }
            /* Held at once: reading `_alignment`, the hash function and the block
               write below are Python code, which may change `entries` and `_plain`. */
            known_of[n] = Py_NewRef(known);
            Py_INCREF(value);
            held = n + 1;
            spec[n++] = (uint64_t)sid_value;
            continue;
        }
        if (PyUnicode_GET_LENGTH(name) >= 2 && PyUnicode_READ_CHAR(name, 0) == '_' &&
            PyUnicode_READ_CHAR(name, 1) == '_')
            continue; /* `__key__` and the like: not entries */
        goto fallback;
    }
    alignment = PyObject_GetAttr(writer, wnames[W_ALIGNMENT]);
    if (alignment == NULL)
        goto done;
    long align = PyLong_AsLong(alignment);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        goto fallback;
    }
    if (!alignment_ok(align))
        goto fallback;
    uint64_t mask = (uint64_t)align - 1;
    if (!record_sizes(key_len, in, n, mask, &head_length, &length) || length > JOIN_LIMIT)
        goto fallback;
    raw_key = PyBytes_FromStringAndSize((const char *)PyUnicode_1BYTE_DATA(key), key_len);
    if (raw_key == NULL)
        goto done;
    PyObject *seen = PyObject_GetAttr(writer, wnames[W_SEEN]);
    if (seen == NULL)
        goto done;
    int dup = PySet_Check(seen) ? PySet_Contains(seen, raw_key) : 1;
    if (dup != 0) {
        Py_DECREF(seen);
        if (dup < 0)
            goto done;
        goto fallback; /* add() raises DuplicateKeyError */
    }
    h = PyObject_CallOneArg(hash_fn, raw_key);
    if (h == NULL) {
        Py_DECREF(seen);
        goto done;
    }
    khash = PyLong_AsUnsignedLongLong(h);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_DECREF(seen);
        goto fallback;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        in[i].crc = crc32c(0, in[i].buf.buf, (size_t)in[i].buf.len);
    rec = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
    if (rec == NULL) {
        Py_DECREF(seen);
        goto done;
    }
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(rec);
    write_head(buf, PyBytes_AS_STRING(raw_key), key_len, khash, in, n, head_length, length, mask, at);
    write_payloads(buf, in, n, mask, at);

    /* From here on, add()'s effects, in its order. */
    PyObject *block = PyObject_GetAttr(writer, wnames[W_BLOCK]);
    int failed = block == NULL || PyList_Append(block, rec) < 0 ||
                 bump(writer, W_BLOCK_BYTES, (Py_ssize_t)length, &before) < 0;
    Py_XDECREF(block);
    if (!failed && before + (Py_ssize_t)length >= block_limit) {
        PyObject *r = PyObject_CallMethodNoArgs(writer, wnames[W_WRITE_BLOCK]);
        failed = r == NULL;
        Py_XDECREF(r);
    }
    if (failed) { /* add()'s `except BaseException: self._failed = True; raise` */
        PyObject *exc_type, *exc, *tb;
        PyErr_Fetch(&exc_type, &exc, &tb);
        if (PyObject_SetAttr(writer, wnames[W_FAILED], Py_True) < 0)
            PyErr_Clear();
        PyErr_Restore(exc_type, exc, tb);
        Py_DECREF(seen);
        goto done;
    }
    PyObject *keys = PyObject_GetAttr(writer, wnames[W_KEYS]);
    int rc = PySet_Add(seen, raw_key);
    Py_DECREF(seen);
    if (rc < 0 || keys == NULL || PyList_Append(keys, raw_key) < 0) {
        Py_XDECREF(keys);
        goto done;
    }
    Py_DECREF(keys);
    Py_ssize_t offset = 0;
    PyObject *pos_obj = PyObject_GetAttr(writer, wnames[W_POS]);
    if (pos_obj == NULL)
        goto done;
    offset = PyLong_AsSsize_t(pos_obj);
    Py_DECREF(pos_obj);
    if (offset == -1 && PyErr_Occurred())
        goto done;
    uint64_t row[5] = {(uint64_t)offset, length, khash, (uint64_t)key_len, (uint64_t)n};
    uint64_t entry_rows[4 * ADD_MAX_ENTRIES];
    for (Py_ssize_t i = 0; i < n; i++) {
        entry_rows[4 * i] = at[i];
        entry_rows[4 * i + 1] = (uint64_t)in[i].buf.len;
        entry_rows[4 * i + 2] = in[i].crc;
        entry_rows[4 * i + 3] = spec[i];
    }
    if (extend_rows(writer, W_ROWS, row, 5) < 0 || extend_rows(writer, W_ENTRY_ROWS, entry_rows, 4 * n) < 0 ||
        bump(writer, W_POS, (Py_ssize_t)length, &before) < 0 || bump(writer, W_COUNT, 1, &before) < 0)
        goto done;
    result = PyLong_FromSsize_t(before);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        Py_DECREF(in[i].obj);
        Py_DECREF(known_of[i]);
    }
    Py_DECREF(plain);
    Py_XDECREF(alignment);
    Py_XDECREF(raw_key);
    Py_XDECREF(h);
    Py_XDECREF(rec);
    return result;
}


