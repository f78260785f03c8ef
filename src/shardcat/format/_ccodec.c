/*
 * The compiled record codec: the same record blocks as records.py, decoded,
 * verified and encoded in C. records.py stays the reference; recordcodec.py
 * chooses between the two.
 *
 * Written against the plain CPython C API, not Cython: the codec is a few
 * hundred lines of byte arithmetic, so Cython would add a build dependency
 * (and a pinned one, in every build of the wheel) and buy nothing; with the
 * C API a clean clone builds with the machine's compiler alone.
 *
 * How errors are reported: this code checks everything the reference checks,
 * and when a check fails it does not raise an error of its own, it calls the
 * reference implementation with the same arguments, which finds the first
 * problem and raises it. Every error is then the reference's own (same type,
 * same message, same offset), with no second copy of the texts to keep in
 * step, and the cost falls on the error path only. The rule that makes this
 * sound: this code may reject more than the reference (the reference then
 * answers), but never accepts less; the property tests check both ways.
 *
 * What this code reads, it holds: each entry point takes an export of every
 * caller buffer it reads (PyObject_GetBuffer) and references to the items of
 * caller lists, for as long as it reads them, since the Python code it calls
 * (make_layout, a collection) and other threads (while a CRC runs without
 * the GIL) may release or drop them meanwhile. What is read again later (a
 * lazy entry's descriptor) is checked again against the buffer as it is
 * then; what is checked and then used without the GIL (a scatter's pieces,
 * read_packed's rows) is copied first. tests/fuzz/test_fuzz_codec.py runs
 * every entry point against its reference; scripts/sanitize.sh runs it under
 * AddressSanitizer and UBSan.
 *
 * CRC32C: SSE4.2 (three interleaved streams, combined with precomputed shift
 * tables) when the CPU has it, chosen at import; otherwise slicing-by-8
 * tables. Key hashes (xxHash64) stay in Python: they are computed once per
 * record on the write path, by the xxhash module, and never while decoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include "_crc32c.h"
#if defined(__unix__) || defined(__APPLE__)
#define HAVE_PREAD_LINKED 1
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

/* Layout constants: spec.py declares them; test_ccodec.py checks these copies. */
#define HEAD_SIZE 32
#define DESC_SIZE 32
#define MAX_ZERO_PAD 4096   /* records.py compares pads with a 4096-byte run of zeros */
#define JOIN_LIMIT (64 << 10) /* records up to this size are encoded into one bytes object */
#define TEXT_CACHE_MAX 4096
#define GIL_FREE_CRC (1 << 20) /* records from this size CRC their payloads without the GIL */
#define BATCH_ROW_SIZE 40     /* spec.BATCH_ROW_DTYPE: blob u4, shard u4, row u4, reserved u4, at u8, length u8, offset u8 */
static const unsigned char RECORD_TAG[4] = {'R', 'E', 'C', 0};

/* ------------------------------------------------------------------------ */
/* little-endian loads and stores                                            */

static inline uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void st16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void st32(unsigned char *p, uint32_t v)
{
    st16(p, (uint16_t)v);
    st16(p + 2, (uint16_t)(v >> 16));
}
static inline void st64(unsigned char *p, uint64_t v)
{
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
}

static int all_zero(const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        if (*p++)
            return 0;
        n--;
    }
    while (n >= 8) {
        if (ld64(p))
            return 0;
        p += 8;
        n -= 8;
    }
    while (n--)
        if (*p++)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Python objects the codec builds, handed over by recordcodec.py            */

static PyObject *LazyRecord;     /* lazy.LazyRecord, a Record subclass with slots */
static PyObject *make_layout;    /* lazy.make_layout(sig, specs, names) */
static PyObject *EncodedRecord;  /* records.EncodedRecord (a NamedTuple) */
static PyObject *CodecType;      /* spec.Codec */
static PyObject *ref_decode_record, *ref_decode_indexed, *ref_encode_record;
static PyObject *ref_decode_spanned; /* records.decode_spanned */
static PyObject *StoredEntry;    /* entries._StoredEntry: an uncompressed entry, a view */
static PyObject *CodecNone;      /* Codec.NONE */
/* The slots of LazyRecord: their member descriptors, and their offsets in
   the object (a new record's slots are written there directly). A record
   holds the shared read buffer (`_buf`, a memoryview) and where it starts in
   it (`_at`), not a view of its own. */
enum { S_KEY, S_INDEX, S_OFFSET, S_LENGTH, S_BUF, S_AT, S_LAYOUT, S_PATH, S_ENTRIES, S_SOME, S_SOURCE, N_SLOTS };
static const char *slot_names[N_SLOTS] = {"key", "index", "offset", "length", "_buf", "_at",
                                          "_layout", "_path", "_entries", "_some", "_source"};
static PyObject *slots[N_SLOTS];
static Py_ssize_t slot_at[N_SLOTS];

/* Layout tuple fields (lazy.Layout). */
enum { L_SIG, L_NAMES, L_MASK, L_SPECS, L_ORDER, L_WHERE };
/* The slots of _StoredEntry. */
enum { E_RAW, E_STORED, E_CODEC, E_CTYPE, N_ESLOTS };
static const char *eslot_names[N_ESLOTS] = {"_raw", "_stored", "codec", "content_type"};
static PyObject *eslots[N_ESLOTS];
static Py_ssize_t eslot_at[N_ESLOTS];
/* lazy._SpanEntry (a _StoredEntry outside the cyclic GC; see "sealed
   entries") and its own slots `_i` and `_source`; NULL if not set up. */
static PyObject *SpanEntry;
static Py_ssize_t span_i_at, span_source_at;
/* entries.Record (LazyRecord's base) and the offset of its own `entries`
   slot (LazyRecord shadows it with a property): tar_record writes a plain
   record's slots in place. 0 if Record's `entries` is not such a slot. */
static PyObject *RecordType;
static Py_ssize_t record_entries_at;

static int ready(void)
{
    if (LazyRecord == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "shardcat.format._ccodec is not set up; import shardcat.format");
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* decoding                                                                  */

typedef struct {
    long alignment;
    PyObject *names;  /* frozenset or None */
    PyObject *cache;  /* dict */
    int check_padding;
    PyObject *path;
    int acyclic; /* args_acyclic(names, path) */
    PyObject *known_key; /* NULL, or the str the index names: the record's key if equal (no decode) */
    int one_by_one; /* records used one at a time (streams, point lookups): not sealing (see seals) */
} DecodeArgs;

static int key_matches(PyObject *key, const unsigned char *raw, Py_ssize_t raw_len);

/* Records made with these arguments may leave the cyclic GC: `names` is None
   or a frozenset of str, `path` is None or a str (see decode_one). */
static int args_acyclic(PyObject *names, PyObject *path)
{
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
static int is_layout(PyObject *layout)
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

static int set_slot(PyObject *obj, int slot, PyObject *value)
{
    PyObject *d = slots[slot];
    return Py_TYPE(d)->tp_descr_set(d, obj, value);
}

/* Fill an empty slot of a record just allocated (a new reference to value). */
static inline void init_slot(PyObject *obj, int slot, PyObject *value)
{
    Py_INCREF(value);
    *(PyObject **)((char *)obj + slot_at[slot]) = value;
}

/* ------------------------------------------------------------------------ */
/* sealed entries                                                            */

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
typedef struct {
    PyObject_HEAD
    PyObject *rec;  /* borrowed: the record while it is untracked and alive, else NULL */
    Py_buffer buf;  /* the record's read buffer (buf.obj: the shared memoryview), held */
    Py_ssize_t at;  /* where the record starts in it */
    Py_ssize_t n;   /* its descriptors */
} EntrySource;

static void source_dealloc(PyObject *self)
{
    PyBuffer_Release(&((EntrySource *)self)->buf);
    PyObject_Free(self);
}

/* Not GC-tracked (no Py_TPFLAGS_HAVE_GC): it refers to a read-only buffer
   alone, which refers to nothing; not creatable from Python (no tp_new). */
static PyTypeObject EntrySourceType = {
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
#define RECORD_FREE_MAX 64
static PyObject *record_free[RECORD_FREE_MAX];
static int record_free_n;
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

/* A new LazyRecord with every slot empty, tracked by the GC (as
   PyType_GenericAlloc makes it). */
static PyObject *record_alloc(void)
{
    if (record_free_n == 0)
        return PyType_GenericAlloc((PyTypeObject *)LazyRecord, 0);
    PyObject *rec = record_free[--record_free_n];
    PyObject_Init(rec, (PyTypeObject *)LazyRecord); /* a reference of its own; one to its (heap) type */
    PyObject_GC_Track(rec);
    return rec;
}

/* Install the free list if LazyRecord's layout allows it (see above). */
static void install_record_free_list(PyTypeObject *tp)
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
static void retrack(PyObject *rec)
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
static int decode_one(const unsigned char *buf, Py_ssize_t size, PyObject *shared, Py_ssize_t at,
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
           sealed ones, untracked too (see "sealed entries"). It becomes
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
static int hold_plain(PyObject *view, Py_buffer *b)
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

static int alignment_ok(long alignment) { return alignment >= 8 && alignment <= MAX_ZERO_PAD && !(alignment & (alignment - 1)); }

/* decode_record(view, *, path, offset, alignment, index=-1, names=None,
                 text_cache=None, check_padding=False) */
static PyObject *py_decode_record(PyObject *self, PyObject *args, PyObject *kwargs)
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
static int key_matches(PyObject *key, const unsigned char *raw, Py_ssize_t raw_len)
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
static PyObject *py_decode_indexed(PyObject *self, PyObject *args, PyObject *kwargs)
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

static PyTypeObject RecordRunType = {
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

static PyObject *py_iter_records(PyObject *self, PyObject *args)
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

static PyObject *py_decode_run(PyObject *self, PyObject *args) { return run(args, 1); }

static PyObject *py_decode_records(PyObject *self, PyObject *args) { return run(args, 0); }

/* The catalog's packed spans of a record (catalog/spans.py: per entry
   offset u32 | size u32 | crc u32, or offset u64 | size u64 | crc u32 when
   any end passes 4 GiB; the length tells which) equal its descriptors:
   1 yes, 0 no or not sure (the reference decides). */
static int spans_match(const unsigned char *buf, PyObject *spans)
{
    if (!PyBytes_CheckExact(spans))
        return 0;
    unsigned n = ld16(buf + 30);
    Py_ssize_t len = PyBytes_GET_SIZE(spans);
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(spans);
    int wide;
    if (len == (Py_ssize_t)12 * n)
        wide = 0;
    else if (len == (Py_ssize_t)20 * n)
        wide = 1;
    else
        return 0;
    for (unsigned i = 0; i < n; i++) {
        const unsigned char *d = buf + HEAD_SIZE + DESC_SIZE * i;
        uint64_t off, size;
        uint32_t crc;
        if (wide) {
            off = ld64(s + 20 * i), size = ld64(s + 20 * i + 8), crc = ld32(s + 20 * i + 16);
        } else {
            off = ld32(s + 12 * i), size = ld32(s + 12 * i + 4), crc = ld32(s + 12 * i + 8);
        }
        if (off != ld64(d) || size != ld64(d + 8) || crc != ld32(d + 16))
            return 0;
    }
    return 1;
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
static PyObject *py_decode_spanned(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

#ifdef HAVE_PREAD_LINKED
/* pread_linked(fd, n, offset) -> bytes, or None if the file has no name left

   The point lookup's read (format/sources.py has its reference): whether the
   open file still has a name (fstat's st_nlink), then one pread of up to n
   bytes at offset, with the GIL released once for both and no stat_result
   built (os.fstat's object cost more than the read itself). A short read is
   returned short; an error is the OSError os.pread or os.fstat raises. */
static PyObject *py_pread_linked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "pread_linked() takes 3 arguments (fd, n, offset), %zd given", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    long long offset = PyLong_AsLongLong(args[2]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX || n < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "pread_linked: fd, n and offset must be >= 0");
        return NULL;
    }
    PyObject *buf = PyBytes_FromStringAndSize(NULL, n);
    if (buf == NULL)
        return NULL;
    struct stat st;
    ssize_t got = 0;
    int err = 0, linked = 1;
    Py_BEGIN_ALLOW_THREADS
    if (fstat((int)fd, &st) != 0)
        err = errno;
    else if (st.st_nlink == 0)
        linked = 0;
    else {
        do
            got = pread((int)fd, PyBytes_AS_STRING(buf), (size_t)n, (off_t)offset);
        while (got < 0 && errno == EINTR);
        if (got < 0)
            err = errno;
    }
    Py_END_ALLOW_THREADS
    if (err) {
        Py_DECREF(buf);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (!linked) {
        Py_DECREF(buf);
        Py_RETURN_NONE;
    }
    if (got != n && _PyBytes_Resize(&buf, got) < 0)
        return NULL;
    return buf;
}
#endif

#ifdef HAVE_PREAD_LINKED
/* read_packed(fds, table, max_gap, group_bytes) -> list[bytes] | None

   The local batch read (_pread.read_packed is its reference): every record of
   `table` (BATCH_ROW_SIZE-byte rows sorted by (shard, offset); `shard` indexes
   `fds`) read from its file into buffers that hold the records alone, back to
   back in table order. A buffer takes records until the next one would pass
   `group_bytes` (one record larger than that gets a buffer of its own), so a
   record kept alone keeps about that much alive, not the whole batch. Fills
   each row's `blob` (its buffer) and `at` (its first byte there).

   Records of one file at most `max_gap` bytes apart are read by one preadv:
   the records land in their buffers and the gaps between them in one scratch
   area, so there is neither a bytes object per read nor a join of pieces (on
   systems without preadv, one pread per record). The GIL is released for all
   the reads. A short preadv (a signal, the kernel's per-call cap) is redone
   record by record; a record the file ends inside returns None, and the
   caller takes the general path, which reports it. A read error raises the
   OSError os.pread would.

   With `pool` (a list the caller keeps between batches, at most `pool_max`
   buffers), groups that fit `group_bytes` go into the pool's free buffers
   (pool_take) when they fill at least half of one, and come back as
   memoryviews of their own bytes; other groups, and all without a pool,
   are new bytes objects of exactly their size.

   The descriptors are numbers, read without the GIL: the caller keeps each
   open until this returns (FileSource.held, issue 30), since one closed
   meanwhile and its number reused by another open would read another file. */
#if defined(__linux__)
#include <sys/uio.h>
#define HAVE_PREADV 1
#define PACKED_IOV_MAX 1024 /* Linux's UIO_MAXIOV */
#endif
#define PACKED_MAX_GAP (1 << 20)

static int pread_whole(int fd, char *dest, uint64_t length, uint64_t offset, int *err)
{
    /* 1: read whole; 0: the file ends first; -1: an error (errno in *err). */
    while (length) {
        size_t want = length > 0x7FFFF000u ? 0x7FFFF000u : (size_t)length;
        ssize_t got = pread(fd, dest, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            return -1;
        }
        if (got == 0)
            return 0;
        dest += got;
        offset += (uint64_t)got;
        length -= (uint64_t)got;
    }
    return 1;
}


/* A row of read_packed's table as it was checked and planned: the reads
   without the GIL use this copy, not the caller's table, which another
   thread may change meanwhile. */
typedef struct {
    uint64_t at, length, offset; /* in its group's buffer; in the file */
    uint32_t group, shard;
} PackedRow;

/* Append an uninitialised bytes buffer of `size` bytes (one packed group) to `groups`. */
static int append_group(PyObject *groups, uint64_t size)
{
    PyObject *g = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (g == NULL || PyList_Append(groups, g) < 0) {
        Py_XDECREF(g);
        return -1;
    }
    Py_DECREF(g);
    return 0;
}

/* A batch's buffers kept for the next batch (read_packed's `pool`).

   Reading a 10,000-key batch into new buffers faults in every page of them
   (~13,000 minor faults for 50 MB, about half of the whole read on the
   2-core VMs of issue 10), since the allocator hands the freed memory back
   to the system between batches. A pool buffer is a bytes object of exactly
   `group_bytes` that only the pool refers to once its batch is gone: every
   view of it (a memoryview, numpy's frombuffer, any buffer consumer) holds a
   reference to it, so a reference count of one means nothing else can see
   it, and writing the next batch into it is unobservable. Its cached hash
   is reset. Bytes past a group's end keep an earlier batch of this process;
   the group is handed out as a memoryview of its own bytes only.
   Not on free-threaded builds, where a reference count read is not exact. */
#ifndef Py_GIL_DISABLED
#define HAVE_READ_POOL 1
/* A free pool buffer (a new reference), or a new one added to the pool if it has room; NULL with no
   error set if neither. */
static PyObject *pool_take(PyObject *pool, Py_ssize_t *cursor, Py_ssize_t pool_max, Py_ssize_t group_bytes)
{
    while (*cursor < PyList_GET_SIZE(pool)) {
        PyObject *b = PyList_GET_ITEM(pool, *cursor);
        (*cursor)++;
        if (PyBytes_CheckExact(b) && PyBytes_GET_SIZE(b) == group_bytes && Py_REFCNT(b) == 1) {
            _Py_COMP_DIAG_PUSH
            _Py_COMP_DIAG_IGNORE_DEPR_DECLS
            ((PyBytesObject *)b)->ob_shash = -1;
            _Py_COMP_DIAG_POP
            Py_INCREF(b);
            return b;
        }
    }
    if (PyList_GET_SIZE(pool) >= pool_max)
        return NULL; /* none free and no room: the caller makes a buffer of the group's size */
    PyObject *b = PyBytes_FromStringAndSize(NULL, group_bytes);
    if (b != NULL && PyList_Append(pool, b) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    *cursor = PyList_GET_SIZE(pool); /* in use now: not looked at again in this call */
    return b;
}
#endif

/* Append a buffer for a group of `size` bytes: from the pool where there is one and the group fills
   at least half a pool buffer (a small batch, or a batch's last group, gets a buffer of its own size:
   a record kept from it keeps no more than before, and small buffers cost few faults). */
static int add_group(PyObject *groups, uint64_t size, PyObject *pool, Py_ssize_t *cursor, Py_ssize_t pool_max,
                     Py_ssize_t group_bytes)
{
#ifdef HAVE_READ_POOL
    if (pool != Py_None && size <= (uint64_t)group_bytes && 2 * size >= (uint64_t)group_bytes) {
        PyObject *g = pool_take(pool, cursor, pool_max, group_bytes);
        if (g != NULL) {
            int rc = PyList_Append(groups, g);
            Py_DECREF(g);
            return rc;
        }
        if (PyErr_Occurred())
            return -1;
    }
#else
    (void)pool, (void)cursor, (void)pool_max, (void)group_bytes;
#endif
    return append_group(groups, size);
}

/* Each pool buffer in `groups` replaced by a memoryview of its group's bytes alone. */
static int cut_groups(PyObject *groups, const PackedRow *plan, Py_ssize_t rows)
{
    Py_ssize_t n = PyList_GET_SIZE(groups);
    uint64_t *sizes = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    if (sizes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t t = 0; t < rows; t++) /* a group's rows lie back to back, in order */
        sizes[plan[t].group] = plan[t].at + plan[t].length;
    int rc = 0;
    for (Py_ssize_t g = 0; g < n && rc == 0; g++) {
        PyObject *b = PyList_GET_ITEM(groups, g);
        if ((uint64_t)PyBytes_GET_SIZE(b) == sizes[g])
            continue;
        PyObject *whole = PyMemoryView_FromObject(b), *cut = NULL;
        if (whole != NULL)
            cut = PySequence_GetSlice(whole, 0, (Py_ssize_t)sizes[g]);
        Py_XDECREF(whole);
        if (cut == NULL || PyList_SetItem(groups, g, cut) < 0)
            rc = -1;
    }
    PyMem_Free(sizes);
    return rc;
}

static PyObject *py_read_packed(PyObject *self, PyObject *args)
{
    PyObject *fds_list, *table, *pool = Py_None;
    Py_ssize_t max_gap, group_bytes, pool_max = 0;
    if (!PyArg_ParseTuple(args, "O!Onn|On", &PyList_Type, &fds_list, &table, &max_gap, &group_bytes, &pool,
                          &pool_max))
        return NULL;
    if (max_gap < 0 || max_gap > PACKED_MAX_GAP || group_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "read_packed: max_gap must be in [0, 1 MiB], group_bytes >= 1");
        return NULL;
    }
    if (pool != Py_None && !PyList_CheckExact(pool)) {
        PyErr_SetString(PyExc_TypeError, "read_packed: pool must be a list or None");
        return NULL;
    }
#ifndef HAVE_READ_POOL
    pool = Py_None;
#endif
    Py_buffer tb;
    if (PyObject_GetBuffer(table, &tb, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *groups = NULL, *result = NULL;
    int *fds = NULL;
    PackedRow *plan = NULL;
    char **dests = NULL, *scratch = NULL;
#ifdef HAVE_PREADV
    struct iovec *iov = NULL;
#endif
    if (tb.len % BATCH_ROW_SIZE) {
        PyErr_SetString(PyExc_ValueError, "read_packed: the table is not a whole number of rows");
        goto finally;
    }
    Py_ssize_t rows = tb.len / BATCH_ROW_SIZE, nfds = PyList_GET_SIZE(fds_list);
    unsigned char *base = (unsigned char *)tb.buf;
    fds = PyMem_Malloc(sizeof(int) * (size_t)(nfds ? nfds : 1));
    plan = PyMem_RawMalloc(sizeof(PackedRow) * (size_t)(rows ? rows : 1));
    if (fds == NULL || plan == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    for (Py_ssize_t i = 0; i < nfds; i++) {
        if (i >= PyList_GET_SIZE(fds_list)) { /* __index__ of an item before may have changed the list */
            PyErr_SetString(PyExc_RuntimeError, "read_packed: the descriptor list changed");
            goto finally;
        }
        long fd = PyLong_AsLong(PyList_GET_ITEM(fds_list, i));
        if (fd == -1 && PyErr_Occurred())
            goto finally;
        if (fd < 0 || fd > INT_MAX) {
            PyErr_SetString(PyExc_ValueError, "read_packed: a descriptor is negative");
            goto finally;
        }
        fds[i] = (int)fd;
    }
    /* Plan the buffers (GIL held: they are Python objects), checking every row. */
    groups = PyList_New(0);
    if (groups == NULL)
        goto finally;
    uint64_t size = 0, prev_shard = 0, prev_offset = 0;
    Py_ssize_t ngroups = 0, cursor = 0;
    for (Py_ssize_t t = 0; t < rows; t++) {
        unsigned char *r = base + BATCH_ROW_SIZE * t;
        uint64_t shard = ld32(r + 4), length = ld64(r + 24), offset = ld64(r + 32);
        if (shard >= (uint64_t)nfds || length > (uint64_t)PY_SSIZE_T_MAX / 2 ||
            offset > (uint64_t)LLONG_MAX - length || (t && (shard < prev_shard ||
                                                           (shard == prev_shard && offset < prev_offset)))) {
            PyErr_Format(PyExc_ValueError,
                         "read_packed: table row %zd is out of range or out of (shard, offset) order", t);
            goto finally;
        }
        prev_shard = shard;
        prev_offset = offset;
        if (t == 0 || (size && size + length > (uint64_t)group_bytes)) {
            if (t) {
                if (add_group(groups, size, pool, &cursor, pool_max, group_bytes) < 0)
                    goto finally;
                ngroups++;
            }
            size = 0;
        }
        st32(r, (uint32_t)ngroups);
        st64(r + 16, size);
        plan[t] = (PackedRow){size, length, offset, (uint32_t)ngroups, (uint32_t)shard};
        size += length;
        if (size > (uint64_t)PY_SSIZE_T_MAX / 2) {
            PyErr_SetString(PyExc_OverflowError, "read_packed: a buffer would be too large");
            goto finally;
        }
    }
    if (rows) {
        if (add_group(groups, size, pool, &cursor, pool_max, group_bytes) < 0)
            goto finally;
        ngroups++;
    }
    dests = PyMem_Malloc(sizeof(char *) * (size_t)(ngroups ? ngroups : 1));
    scratch = PyMem_RawMalloc(max_gap ? (size_t)max_gap : 1);
#ifdef HAVE_PREADV
    iov = PyMem_RawMalloc(sizeof(struct iovec) * PACKED_IOV_MAX);
    if (iov == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
#endif
    if (dests == NULL || scratch == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    for (Py_ssize_t g = 0; g < ngroups; g++)
        dests[g] = PyBytes_AS_STRING(PyList_GET_ITEM(groups, g));
    int err = 0, whole = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t t = 0;
    while (t < rows && whole && !err) {
        const PackedRow *r = &plan[t];
        uint32_t shard = r->shard;
        int fd = fds[shard];
        Py_ssize_t first = t;
#ifdef HAVE_PREADV
        /* One run: records of one file, each at most max_gap after the end of the one before. */
        uint64_t run_start = r->offset, end = run_start, total = 0;
        int niov = 0;
        for (;;) {
            r = &plan[t];
            uint64_t length = r->length, offset = r->offset;
            if (offset > end) {
                iov[niov].iov_base = scratch;
                iov[niov].iov_len = (size_t)(offset - end);
                niov++;
                total += offset - end;
            }
            if (length) {
                iov[niov].iov_base = dests[r->group] + r->at;
                iov[niov].iov_len = (size_t)length;
                niov++;
            }
            total += length;
            end = offset + length;
            t++;
            if (t == rows || niov + 2 > PACKED_IOV_MAX || total > 0x40000000u)
                break;
            uint64_t next_offset = plan[t].offset;
            if (plan[t].shard != shard || next_offset < end || next_offset - end > (uint64_t)max_gap)
                break;
        }
        ssize_t got;
        do
            got = niov ? preadv(fd, iov, niov, (off_t)run_start) : 0;
        while (got < 0 && errno == EINTR);
        if (got < 0) {
            err = errno;
            break;
        }
        if ((uint64_t)got == total)
            continue;
        /* Short: redo this run record by record (pread_whole continues short reads). */
#else
        t++;
#endif
        for (Py_ssize_t u = first; u < t && whole && !err; u++) {
            const PackedRow *q = &plan[u];
            whole = pread_whole(fd, dests[q->group] + q->at, q->length, q->offset, &err) == 1;
        }
    }
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto finally;
    }
    if (!whole) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto finally;
    }
    if (pool != Py_None && cut_groups(groups, plan, rows) < 0)
        goto finally;
    result = groups;
    groups = NULL;
finally:
    PyBuffer_Release(&tb);
    Py_XDECREF(groups);
    PyMem_Free(fds);
    PyMem_RawFree(plan);
    PyMem_Free(dests);
    PyMem_RawFree(scratch);
#ifdef HAVE_PREADV
    PyMem_RawFree(iov);
#endif
    return result;
}
#endif

/* The i-th int64 of a caller's array, whatever its alignment (a byte copy:
   one load on x86; an int64_t pointer into it would need 8-byte alignment). */
static inline int64_t i64_at(const Py_buffer *b, Py_ssize_t i)
{
    int64_t v;
    memcpy(&v, (const char *)b->buf + 8 * i, sizeof v);
    return v;
}

#define CHANGED (-1) /* in *err: a caller's array changed while it was read without the GIL */

/* Piece i (positions[i], lengths[i]) in *p and *l, if it lies inside a
   destination of dest_len bytes. Read again where it is used without the
   GIL: another thread may have changed the caller's arrays since they were
   checked, so each value is checked where it is used. */
static inline int piece_at(const Py_buffer *pos, const Py_buffer *len, Py_ssize_t i, Py_ssize_t dest_len,
                           int64_t *p, int64_t *l)
{
    *p = i64_at(pos, i);
    *l = i64_at(len, i);
    return *p >= 0 && *l >= 0 && *l <= dest_len && *p <= dest_len - *l;
}

/* The ValueError of an array that changed while it was used without the GIL. */
static void set_changed(const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s: an array changed while it was read; nothing is guaranteed written", what);
}

/* Pieces of a scatter read or copy: two int64 arrays (positions in dest,
   lengths) of one length, every piece inside dest: *n of them, *total bytes. */
static int scatter_pieces(Py_buffer *pos, Py_buffer *len, Py_ssize_t dest_len, Py_ssize_t *n, uint64_t *total)
{
    if (pos->len != len->len || pos->len % 8) {
        PyErr_SetString(PyExc_ValueError, "scatter: positions and lengths must be int64 arrays of one length");
        return -1;
    }
    *n = pos->len / 8;
    *total = 0;
    for (Py_ssize_t i = 0; i < *n; i++) {
        int64_t p, l;
        if (!piece_at(pos, len, i, dest_len, &p, &l)) {
            PyErr_Format(PyExc_ValueError, "scatter: piece %zd (%lld bytes at %lld) is outside the destination",
                         i, (long long)l, (long long)p);
            return -1;
        }
        if ((uint64_t)l > (uint64_t)LLONG_MAX - *total) { /* file offsets are signed 64-bit */
            PyErr_SetString(PyExc_ValueError, "scatter: the pieces hold more than 2**63 - 1 bytes");
            return -1;
        }
        *total += (uint64_t)l;
    }
    return 0;
}

/* scatter_copy(src, dest, positions, lengths) -> None

   src's bytes in order, piece i (lengths[i] bytes) copied to dest[positions[i]:]
   (_scatter.scatter_copy is the reference): a remote shard's run of records,
   read in one piece, laid out in a packed batch's block with one call. */
static PyObject *py_scatter_copy(PyObject *self, PyObject *args)
{
    Py_buffer src, dest, pos, len;
    if (!PyArg_ParseTuple(args, "y*w*y*y*", &src, &dest, &pos, &len))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n;
    uint64_t total;
    if (scatter_pieces(&pos, &len, dest.len, &n, &total) < 0)
        goto finally;
    if (total != (uint64_t)src.len) {
        PyErr_Format(PyExc_ValueError, "scatter_copy: the pieces hold %llu bytes, the source %zd",
                     (unsigned long long)total, src.len);
        goto finally;
    }
    /* The GIL is held from the check on: no other thread changes the arrays. */
    const char *from = (const char *)src.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = i64_at(&pos, i), l = i64_at(&len, i);
        memcpy((char *)dest.buf + p, from, (size_t)l);
        from += l;
    }
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dest);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return result;
}

#ifdef HAVE_PREAD_LINKED
/* One run: the file's bytes from `at` on, pieces first..first + n - 1 of
   (pos, len) to dest (dest_len bytes), with one preadv per PACKED_IOV_MAX
   pieces (iov: that many slots, or NULL without preadv). 1: whole; 0: the
   file ends first; -1: an error (errno, or CHANGED, in *err). Called
   without the GIL: each piece is checked where it is read (piece_at). */
static int scatter_run(int fd, uint64_t at, char *dest, Py_ssize_t dest_len, const Py_buffer *pos,
                       const Py_buffer *len, Py_ssize_t first_piece, Py_ssize_t n, void *iov_slots, int *err)
{
    int whole = 1;
    Py_ssize_t i = first_piece, stop = first_piece + n;
    int64_t p, l;
#ifdef HAVE_PREADV
    struct iovec *iov = (struct iovec *)iov_slots;
#else
    (void)iov_slots;
#endif
    while (i < stop && whole && !*err) {
        Py_ssize_t first = i;
#ifdef HAVE_PREADV
        uint64_t want = 0;
        int niov = 0;
        while (i < stop && niov < PACKED_IOV_MAX && want < 0x40000000u) {
            if (!piece_at(pos, len, i, dest_len, &p, &l)) {
                *err = CHANGED;
                return -1;
            }
            if (l) {
                iov[niov].iov_base = dest + p;
                iov[niov].iov_len = (size_t)l;
                niov++;
            }
            want += (uint64_t)l;
            i++;
        }
        ssize_t got;
        do
            got = niov ? preadv(fd, iov, niov, (off_t)at) : 0;
        while (got < 0 && errno == EINTR);
        if (got < 0) {
            *err = errno;
            return -1;
        }
        if ((uint64_t)got == want) {
            at += want;
            continue;
        }
#else
        i++;
#endif
        /* Short (a signal, the kernel's cap, the end of the file): piece by piece. */
        uint64_t q = at;
        for (Py_ssize_t u = first; u < i && whole && !*err; u++) {
            if (!piece_at(pos, len, u, dest_len, &p, &l)) {
                *err = CHANGED;
                return -1;
            }
            whole = pread_whole(fd, dest + p, (uint64_t)l, q, err) == 1;
            q += (uint64_t)l;
        }
        at = q;
    }
    return *err ? -1 : whole;
}

/* The OSError of a failed read, or the ValueError of an array changed meanwhile. */
static void set_read_error(int err, const char *what)
{
    if (err == CHANGED) {
        set_changed(what);
        return;
    }
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
}

/* scatter_read(fd, offset, dest, positions, lengths) -> bool

   The file's bytes from `offset` on, piece i (lengths[i] bytes, in file order)
   read straight to dest[positions[i]:] (_scatter.scatter_read is the
   reference): a run of whole records lands in a packed batch's block, each
   payload at its column's place, with one preadv per PACKED_IOV_MAX pieces
   and no intermediate buffer; the GIL is released meanwhile. A short preadv
   is continued piece by piece; False if the file ends first. A read error
   raises the OSError os.pread would. The caller keeps `fd` open until this
   returns (FileSource.held; read_packed says why). */
static PyObject *py_scatter_read(PyObject *self, PyObject *args)
{
    int fd;
    long long offset;
    Py_buffer dest, pos, len;
    if (!PyArg_ParseTuple(args, "iLw*y*y*", &fd, &offset, &dest, &pos, &len))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n;
    uint64_t total;
    void *iov = NULL;
    if (scatter_pieces(&pos, &len, dest.len, &n, &total) < 0)
        goto finally;
    if (fd < 0 || offset < 0 || (uint64_t)offset > (uint64_t)LLONG_MAX - total) {
        PyErr_SetString(PyExc_ValueError, "scatter_read: fd and offset must be >= 0");
        goto finally;
    }
#ifdef HAVE_PREADV
    iov = PyMem_RawMalloc(sizeof(struct iovec) * PACKED_IOV_MAX);
    if (iov == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
#endif
    int err = 0, whole;
    Py_BEGIN_ALLOW_THREADS
    whole = scatter_run(fd, (uint64_t)offset, (char *)dest.buf, dest.len, &pos, &len, 0, n, iov, &err);
    Py_END_ALLOW_THREADS
    if (err) {
        set_read_error(err, "scatter_read");
        goto finally;
    }
    result = PyBool_FromLong(whole);
finally:
    PyMem_RawFree(iov);
    PyBuffer_Release(&dest);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return result;
}

/* scatter_read_runs(fds, offsets, counts, dest, positions, lengths) -> int

   Many runs in one call (_scatter.scatter_read_runs is the reference): run k
   reads file fds[k] from offsets[k] into the next counts[k] pieces, as
   scatter_read does (int64 arrays, one row per run). A shuffled packed batch
   gathers its records, each a run of its own, from several shards so, with
   the GIL released once. Returns -1 when every run was read whole, else the
   first run the file ended inside (the runs after it are not read). The
   caller keeps every descriptor open until this returns (read_packed says why). */
static PyObject *py_scatter_read_runs(PyObject *self, PyObject *args)
{
    Py_buffer fdb, offb, cntb, dest, pos, len;
    if (!PyArg_ParseTuple(args, "y*y*y*w*y*y*", &fdb, &offb, &cntb, &dest, &pos, &len))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n, runs = fdb.len / 8;
    uint64_t total;
    void *iov = NULL;
    if (scatter_pieces(&pos, &len, dest.len, &n, &total) < 0)
        goto finally;
    if (fdb.len % 8 || offb.len != fdb.len || cntb.len != fdb.len) {
        PyErr_SetString(PyExc_ValueError, "scatter_read_runs: fds, offsets and counts must be int64 arrays of one length");
        goto finally;
    }
    Py_ssize_t pieces = 0;
    for (Py_ssize_t k = 0; k < runs; k++) {
        int64_t fd = i64_at(&fdb, k), off = i64_at(&offb, k), cnt = i64_at(&cntb, k);
        if (fd < 0 || fd > INT_MAX || off < 0 || cnt < 0 || cnt > n - pieces) {
            PyErr_Format(PyExc_ValueError, "scatter_read_runs: run %zd (fd %lld, offset %lld, %lld pieces) "
                         "is invalid or needs more pieces than given", k, (long long)fd,
                         (long long)off, (long long)cnt);
            goto finally;
        }
        pieces += (Py_ssize_t)cnt;
    }
    if (pieces != n) {
        PyErr_Format(PyExc_ValueError, "scatter_read_runs: the runs take %zd pieces, %zd were given", pieces, n);
        goto finally;
    }
#ifdef HAVE_PREADV
    iov = PyMem_RawMalloc(sizeof(struct iovec) * PACKED_IOV_MAX);
    if (iov == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
#endif
    int err = 0;
    Py_ssize_t ended = -1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < runs && !err; k++) {
        /* Read again without the GIL: checked again where used. */
        int64_t fd = i64_at(&fdb, k), off = i64_at(&offb, k), cnt = i64_at(&cntb, k);
        if (fd < 0 || fd > INT_MAX || off < 0 || cnt < 0 || cnt > n - at) {
            err = CHANGED;
            break;
        }
        if (scatter_run((int)fd, (uint64_t)off, (char *)dest.buf, dest.len, &pos, &len, at, (Py_ssize_t)cnt, iov,
                        &err) == 0) {
            ended = k;
            break;
        }
        at += (Py_ssize_t)cnt;
    }
    Py_END_ALLOW_THREADS
    if (err) {
        set_read_error(err, "scatter_read_runs");
        goto finally;
    }
    result = PyLong_FromSsize_t(ended);
finally:
    PyMem_RawFree(iov);
    PyBuffer_Release(&fdb);
    PyBuffer_Release(&offb);
    PyBuffer_Release(&cntb);
    PyBuffer_Release(&dest);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return result;
}
#endif

/* gather_copy(sources, which, offsets, counts, dest, positions, lengths) -> None

   scatter_read_runs from buffers in memory (_scatter.gather_copy is the reference):
   run k copies sources[which[k]][offsets[k]:] into the next counts[k] pieces
   (int64 arrays, one row per run). A shuffled packed batch gathers its records
   so from the shards' read-only mappings: a memcpy per piece, no system call
   per record; the GIL is released meanwhile. */
static PyObject *py_gather_copy(PyObject *self, PyObject *args)
{
    PyObject *sources;
    Py_buffer whb, offb, cntb, dest, pos, len;
    if (!PyArg_ParseTuple(args, "Oy*y*y*w*y*y*", &sources, &whb, &offb, &cntb, &dest, &pos, &len))
        return NULL;
    PyObject *result = NULL, *seq = NULL;
    Py_buffer *bufs = NULL;
    Py_ssize_t nbufs = 0, got = 0, n, runs = whb.len / 8;
    uint64_t total;
    if (scatter_pieces(&pos, &len, dest.len, &n, &total) < 0)
        goto finally;
    if (whb.len % 8 || offb.len != whb.len || cntb.len != whb.len) {
        PyErr_SetString(PyExc_ValueError, "gather_copy: which, offsets and counts must be int64 arrays of one length");
        goto finally;
    }
    seq = PySequence_Tuple(sources); /* held: not the caller's list, which code may change */
    if (seq == NULL)
        goto finally;
    nbufs = PyTuple_GET_SIZE(seq);
    bufs = PyMem_Calloc(nbufs ? (size_t)nbufs : 1, sizeof(Py_buffer));
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    for (; got < nbufs; got++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(seq, got), &bufs[got], PyBUF_SIMPLE) < 0)
            goto finally;
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < runs; k++) {
        int64_t wh = i64_at(&whb, k), off = i64_at(&offb, k), cnt = i64_at(&cntb, k);
        if (wh < 0 || wh >= nbufs || off < 0 || cnt < 0 || cnt > n - at) {
            PyErr_Format(PyExc_ValueError, "gather_copy: run %zd (source %lld, offset %lld, %lld pieces) "
                         "is invalid or needs more pieces than given", k, (long long)wh,
                         (long long)off, (long long)cnt);
            goto finally;
        }
        uint64_t want = 0;
        for (Py_ssize_t i = at; i < at + cnt; i++)
            want += (uint64_t)i64_at(&len, i);
        if ((uint64_t)off > (uint64_t)bufs[wh].len || want > (uint64_t)bufs[wh].len - (uint64_t)off) {
            PyErr_Format(PyExc_ValueError, "gather_copy: run %zd (%llu bytes at %lld) is outside source %lld (%zd bytes)",
                         k, (unsigned long long)want, (long long)off, (long long)wh, bufs[wh].len);
            goto finally;
        }
        at += (Py_ssize_t)cnt;
    }
    if (at != n) {
        PyErr_Format(PyExc_ValueError, "gather_copy: the runs take %zd pieces, %zd were given", at, n);
        goto finally;
    }
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    for (Py_ssize_t k = 0; k < runs && !changed; k++) {
        /* Read again without the GIL: checked again where used (the source's room too). */
        int64_t wh = i64_at(&whb, k), off = i64_at(&offb, k), cnt = i64_at(&cntb, k), p, l;
        if (wh < 0 || wh >= nbufs || off < 0 || off > bufs[wh].len || cnt < 0 || cnt > n - i) {
            changed = 1;
            break;
        }
        const char *from = (const char *)bufs[wh].buf + off;
        Py_ssize_t room = bufs[wh].len - (Py_ssize_t)off;
        for (Py_ssize_t e = i + (Py_ssize_t)cnt; i < e; i++) {
            if (!piece_at(&pos, &len, i, dest.len, &p, &l) || l > room) {
                changed = 1;
                break;
            }
            memcpy((char *)dest.buf + p, from, (size_t)l);
            from += l;
            room -= (Py_ssize_t)l;
        }
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        set_changed("gather_copy");
        goto finally;
    }
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&bufs[j]);
    PyMem_Free(bufs);
    Py_XDECREF(seq);
    PyBuffer_Release(&whb);
    PyBuffer_Release(&offb);
    PyBuffer_Release(&cntb);
    PyBuffer_Release(&dest);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return result;
}

/* crc32c_spans(buf, starts, lengths) -> bytes

   The CRC32C of each span buf[starts[i] : starts[i] + lengths[i]] (int64
   arrays), as little-endian uint32s back to back (_scatter.crc32c_spans is
   the reference): every record head and payload of a packed batch checked
   in one call. */
static PyObject *py_crc32c_spans(PyObject *self, PyObject *args)
{
    Py_buffer b, pos, len;
    if (!PyArg_ParseTuple(args, "y*y*y*", &b, &pos, &len))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n;
    uint64_t total;
    if (scatter_pieces(&pos, &len, b.len, &n, &total) < 0)
        goto finally;
    result = PyBytes_FromStringAndSize(NULL, 4 * n);
    if (result == NULL)
        goto finally;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const unsigned char *data = (const unsigned char *)b.buf;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p, l;
        if (!piece_at(&pos, &len, i, b.len, &p, &l)) { /* read again without the GIL: checked again */
            changed = 1;
            break;
        }
        st32(out + 4 * i, crc32c(0, data + p, (size_t)l));
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        Py_CLEAR(result);
        set_changed("crc32c_spans");
    }
finally:
    PyBuffer_Release(&b);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return result;
}

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
static PyObject *py_batch_table(PyObject *self, PyObject *args)
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
static PyObject *py_decode_batch(PyObject *self, PyObject *args)
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

/* ------------------------------------------------------------------------ */
/* encoding                                                                  */

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
static PyObject *py_encode_record(PyObject *self, PyObject *args)
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
static PyObject *py_add_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

/* ------------------------------------------------------------------------ */
/* lazy entries                                                              */

/* A new reference to a slot of a LazyRecord (read where the descriptor would). */
static PyObject *get_slot(PyObject *obj, int slot)
{
    PyObject *v = *(PyObject **)((char *)obj + slot_at[slot]);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "LazyRecord has no %s", slot_names[slot]);
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

/* view[start:start + size] for the plain memoryview `view`: the memoryview
   slicing makes, without the slice object and the index arithmetic a slice
   needs (a new view of the same managed buffer, narrowed as memoryview's
   own init_slice does). Any other view is sliced the ordinary way. The span
   must lie in the view (callers clamp it: clamp_span); a released view
   raises ValueError, as slicing it does. */
static PyObject *subview(PyObject *view, Py_ssize_t start, Py_ssize_t size)
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
   ~290 instructions (callgrind, benchmarks/stream_instructions.py --access
   view: 7,800 -> 8,087 per record) for little. Batches hand out thousands
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
static PyObject *py_entry(PyObject *self, PyObject *args)
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

static PyMethodDef getitem_def = {"__getitem__", py_getitem, METH_VARARGS, "The entry called `name`."};

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

static PyMethodDef getitem_method_def = {"__getitem__", (PyCFunction)(void (*)(void))py_getitem_method,
                                         METH_FASTCALL, "The entry called `name`."};

/* ------------------------------------------------------------------------ */
/* module                                                                    */

/* tar_record(data, key, specs, spans, offset, record) -> Record | None

   format/tar/read.py's read_tar_record, compiled, for the point lookup of a
   tar sample (issue 11; reading/point.py's TarFinisher calls it): `data` the
   sample's bytes (bytes), `specs` a tuple of (name, content_type) per entry
   (the layout's), `spans` the catalog row's packed (offset in the sample,
   size, CRC32C) per entry (catalog/spans.py: <III or <QQI + <I each),
   `record` the Record class. The same record as the Python function: each
   entry a _StoredEntry whose view is a slice of one memoryview of `data`,
   index -1, the sample's offset and length.

   None wherever the Python function raises (a span past the bytes, a CRC32C
   that is not the indexed one, spans that do not fit the specs): the caller
   then hands the lookup to the Python path, which raises the typed error.
   Every CRC is checked before any object is made. */
static PyObject *py_tar_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
    Py_ssize_t n = PyTuple_GET_SIZE(specs), packed = PyBytes_GET_SIZE(spans), width;
    /* As spans.unpack_spans: the narrow packing first. */
    if (packed == 12 * n)
        width = 12;
    else if (packed == 20 * n)
        width = 20;
    else
        Py_RETURN_NONE;
    const unsigned char *sp = (const unsigned char *)PyBytes_AS_STRING(spans);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    uint64_t len = (uint64_t)PyBytes_GET_SIZE(data);
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *d = sp + width * i;
        uint64_t at = width == 12 ? ld32(d) : ld64(d), size = width == 12 ? ld32(d + 4) : ld64(d + 8);
        uint32_t crc = ld32(d + width - 4);
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (at > len || size > len - at || !PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(spec, 0)) || crc32c(0, buf + at, (size_t)size) != crc)
            Py_RETURN_NONE;
    }
    PyObject *view = PyMemoryView_FromObject(data), *entries = PyDict_New(), *out = NULL, *length = NULL,
             *minus_one = NULL;
    if (view == NULL || entries == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *d = sp + width * i;
        Py_ssize_t at = (Py_ssize_t)(width == 12 ? ld32(d) : ld64(d));
        Py_ssize_t size = (Py_ssize_t)(width == 12 ? ld32(d + 4) : ld64(d + 8));
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        PyObject *payload = subview(view, at, size);
        PyObject *entry = payload ? PyType_GenericAlloc((PyTypeObject *)StoredEntry, 0) : NULL;
        if (entry == NULL) {
            Py_XDECREF(payload);
            goto done;
        }
        /* As _StoredEntry(payload, content_type, Codec.NONE): the empty slots, written in place. */
        PyObject *values[N_ESLOTS] = {payload, payload, CodecNone, PyTuple_GET_ITEM(spec, 1)};
        for (int k = 0; k < N_ESLOTS; k++) {
            Py_INCREF(values[k]);
            *(PyObject **)((char *)entry + eslot_at[k]) = values[k];
        }
        Py_DECREF(payload);
        int failed = PyDict_SetItem(entries, PyTuple_GET_ITEM(spec, 0), entry);
        Py_DECREF(entry);
        if (failed < 0)
            goto done;
    }
    length = PyLong_FromSsize_t(PyBytes_GET_SIZE(data));
    minus_one = PyLong_FromLong(-1);
    if (length == NULL || minus_one == NULL)
        goto done;
    if (record == RecordType && record_entries_at > 0) {
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

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &b, &value))
        return NULL;
    if (value > 0xfffffffful) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "a CRC32C value is an unsigned 32-bit integer");
        return NULL;
    }
    uint32_t crc;
    if (b.len >= (1 << 20)) { /* long enough to let other threads run meanwhile */
        Py_BEGIN_ALLOW_THREADS crc = crc32c((uint32_t)value, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c((uint32_t)value, b.buf, (size_t)b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_crc32c_table(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &b, &value))
        return NULL;
    uint32_t crc = crc_sw((uint32_t)value, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

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

static int install_entry_methods(PyTypeObject *stored)
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

static PyObject *py_setup(PyObject *self, PyObject *args)
{
    PyObject *objs[8], *spanned = NULL, *span_entry = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOO|OO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &spanned, &span_entry))
        return NULL;
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
    PyObject *getitem_method = PyDescr_NewMethod((PyTypeObject *)objs[0], &getitem_method_def);
    if (getitem_method == NULL || PyObject_SetAttrString(objs[0], "__getitem__", getitem_method) < 0) {
        Py_XDECREF(getitem_method);
        return NULL;
    }
    Py_DECREF(getitem_method);
    if (install_entry_methods((PyTypeObject *)objs[7]) < 0)
        return NULL;
    install_record_free_list((PyTypeObject *)objs[0]);
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
    Py_RETURN_NONE;
}

/* track(record): a LazyRecord back under the cyclic GC (lazy.py calls it
   before a record refers to anything set from Python). */
static PyObject *py_track(PyObject *self, PyObject *rec)
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
static PyObject *py_unseal(PyObject *self, PyObject *entry)
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
        PyModule_AddIntConstant(m, "GIL_FREE_CRC", GIL_FREE_CRC) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
