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
 * every entry point against its reference; scripts/sanitize.sh runs them under
 * AddressSanitizer and UBSan.
 *
 * The units (one extension module, shardcat.format._ccodec; this header
 * declares what they share, once): module.c (set-up, method table), crc.c,
 * decode.c (one record), stream.c (stream buffers), batch.c (get_many's
 * batches), packed.c (local batch reads), scatter.c (scatter/gather copies
 * and reads), encode.c (encode_record, add_plain), lazy.c (lazy records,
 * sealed entries, installed accessors), tar_record.c; layout.h holds the
 * byte layout's constants.
 *
 * CRC32C: SSE4.2 (three interleaved streams, combined with precomputed shift
 * tables) when the CPU has it, chosen at import; otherwise slicing-by-8
 * tables. Key hashes (xxHash64) stay in Python: they are computed once per
 * record on the write path, by the xxhash module, and never while decoding.
 */
#ifndef SHARDCAT_CCODEC_H
#define SHARDCAT_CCODEC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#define HAVE_PREAD_LINKED 1
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#endif
#if defined(__linux__)
#include <sys/uio.h>
#define HAVE_PREADV 1
#define PACKED_IOV_MAX 1024 /* Linux's UIO_MAXIOV */
#endif

/* What the units share stays inside the module (one .so, several units). */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* CPython-internal tricks, behind one switch. The codec's speed leans on
   what CPython's C API allows but does not promise to keep:
     - records (and their sealed entries) taken out of the cyclic GC and put
       back when Python sets anything on them (decode_one, lazy.c);
     - a free list of LazyRecord objects as the type's tp_dealloc (lazy.c);
     - properties and methods installed on the Python classes by _setup
       (LazyRecord.__getitem__, _StoredEntry.__len__/.view/.data);
     - tar_record's Record and _StoredEntry objects made by writing their
       empty slots in place, without calling the classes.
   SC_TRICKS_BUILT: compiled in only where they were tested, a build of
   CPython 3.10-3.13 with the GIL; never in a free-threaded build
   (Py_GIL_DISABLED), whose collector and allocator they would race.
   cpython_tricks: on at run time unless _setup is told otherwise
   (recordcodec passes implementations.cpython_tricks(),
   SHARDCAT_CPYTHON_TRICKS=0 in the environment); 0 where not built. Off,
   the codec takes the plain path, the reference: every record stays under
   the collector, is freed by CPython, and the classes keep their Python
   accessors. Slot offsets read from the types' member descriptors
   (structmember's own API) stay in both modes. */
#if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030E0000
#define SC_TRICKS_BUILT 1
#else
#define SC_TRICKS_BUILT 0
#endif
extern int cpython_tricks;

#define SC_CRC_SHARED 1 /* one copy of the CRC tables, in crc.c */
#include "../_crc32c.h"

#include "layout.h"
#include "spans.h"

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

static inline int all_zero(const unsigned char *p, size_t n)
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


/* Python objects the codec builds, handed over by recordcodec.py            */

extern PyObject *LazyRecord;     /* lazy.LazyRecord, a Record subclass with slots */
extern PyObject *make_layout;    /* lazy.make_layout(sig, specs, names) */
extern PyObject *EncodedRecord;  /* records.EncodedRecord (a NamedTuple) */
extern PyObject *CodecType;      /* spec.Codec */
extern PyObject *ref_decode_record, *ref_decode_indexed, *ref_encode_record;
extern PyObject *ref_decode_spanned; /* records.decode_spanned */
extern PyObject *StoredEntry;    /* entries._StoredEntry: an uncompressed entry, a view */
extern PyObject *CodecNone;      /* Codec.NONE */
/* The slots of LazyRecord: their member descriptors, and their offsets in
   the object (a new record's slots are written there directly). A record
   holds the shared read buffer (`_buf`, a memoryview) and where it starts in
   it (`_at`), not a view of its own. */
enum { S_KEY, S_INDEX, S_OFFSET, S_LENGTH, S_BUF, S_AT, S_LAYOUT, S_PATH, S_ENTRIES, S_SOME, S_SOURCE, N_SLOTS };
extern const char *slot_names[N_SLOTS];
extern PyObject *slots[N_SLOTS];
extern Py_ssize_t slot_at[N_SLOTS];

/* Layout tuple fields (lazy.Layout). */
enum { L_SIG, L_NAMES, L_MASK, L_SPECS, L_ORDER, L_WHERE };
/* The slots of _StoredEntry. */
enum { E_RAW, E_STORED, E_CODEC, E_CTYPE, N_ESLOTS };
extern const char *eslot_names[N_ESLOTS];
extern PyObject *eslots[N_ESLOTS];
extern Py_ssize_t eslot_at[N_ESLOTS];
/* lazy._SpanEntry (a _StoredEntry outside the cyclic GC; see "sealed
   entries") and its own slots `_i` and `_source`; NULL if not set up. */
extern PyObject *SpanEntry;
extern Py_ssize_t span_i_at, span_source_at;
/* entries.Record (LazyRecord's base) and the offset of its own `entries`
   slot (LazyRecord shadows it with a property): tar_record writes a plain
   record's slots in place. 0 if Record's `entries` is not such a slot. */
extern PyObject *RecordType;
extern Py_ssize_t record_entries_at;

static inline int ready(void)
{
    if (LazyRecord == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "shardcat.format._ccodec is not set up; import shardcat.format");
        return 0;
    }
    return 1;
}


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


/* ------------------------------------------------------------------------ */
/* What each unit offers the others                                          */

/* decode.c: one record decoded (decode_one), and the checks the batch and
   stream decoders share. */
int hold_plain(PyObject *view, Py_buffer *b);
int args_acyclic(PyObject *names, PyObject *path);
int decode_one(const unsigned char *buf, Py_ssize_t size, PyObject *shared, Py_ssize_t at, const DecodeArgs *a,
               PyObject *offset, PyObject *index, PyObject **out);
int key_matches(PyObject *key, const unsigned char *raw, Py_ssize_t raw_len);
int spans_match(const unsigned char *buf, PyObject *spans);
PyObject *py_unpack_spans(PyObject *self, PyObject *args); /* decode.c */
int is_layout(PyObject *layout);

/* lazy.c: lazy records and their entries, sealed entries, the record free list. */
typedef struct {
    PyObject_HEAD
    PyObject *rec;  /* borrowed: the record while it is untracked and alive, else NULL */
    Py_buffer buf;  /* the record's read buffer (buf.obj: the shared memoryview), held */
    Py_ssize_t at;  /* where the record starts in it */
    Py_ssize_t n;   /* its descriptors */
} EntrySource;
extern PyTypeObject EntrySourceType;
#define RECORD_FREE_MAX 64
extern PyObject *record_free[RECORD_FREE_MAX];
extern int record_free_n;
extern PyMethodDef getitem_def, getitem_method_def;
void retrack(PyObject *rec);
void install_record_free_list(PyTypeObject *tp);
int install_entry_methods(PyTypeObject *stored);
PyObject *subview(PyObject *view, Py_ssize_t start, Py_ssize_t size);

/* stream.c */
extern PyTypeObject RecordRunType;

/* packed.c */
int pread_whole(int fd, char *dest, uint64_t length, uint64_t offset, int *err);

/* The entry points (module.c's method table). */
PyObject *py_crc32c(PyObject *self, PyObject *args);                                  /* crc.c */
PyObject *py_crc32c_table(PyObject *self, PyObject *args);                            /* crc.c */
PyObject *py_decode_record(PyObject *self, PyObject *args, PyObject *kwargs);         /* decode.c */
PyObject *py_decode_indexed(PyObject *self, PyObject *args, PyObject *kwargs);        /* decode.c */
PyObject *py_decode_spanned(PyObject *self, PyObject *const *args, Py_ssize_t nargs); /* decode.c */
PyObject *py_decode_run(PyObject *self, PyObject *args);                              /* stream.c */
PyObject *py_decode_records(PyObject *self, PyObject *args);                          /* stream.c */
PyObject *py_iter_records(PyObject *self, PyObject *args);                            /* stream.c */
PyObject *py_batch_table(PyObject *self, PyObject *args);                             /* batch.c */
PyObject *py_decode_batch(PyObject *self, PyObject *args);                            /* batch.c */
PyObject *py_pread_linked(PyObject *self, PyObject *const *args, Py_ssize_t nargs);   /* packed.c */
PyObject *py_read_packed(PyObject *self, PyObject *args);                             /* packed.c */
PyObject *py_scatter_copy(PyObject *self, PyObject *args);                            /* scatter.c */
PyObject *py_scatter_read(PyObject *self, PyObject *args);                            /* scatter.c */
PyObject *py_scatter_read_runs(PyObject *self, PyObject *args);                       /* scatter.c */
PyObject *py_gather_copy(PyObject *self, PyObject *args);                             /* scatter.c */
PyObject *py_crc32c_spans(PyObject *self, PyObject *args);                            /* scatter.c */
PyObject *py_encode_record(PyObject *self, PyObject *args);                           /* encode.c */
PyObject *py_add_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs);      /* encode.c */
PyObject *py_entry(PyObject *self, PyObject *args);                                   /* lazy.c */
PyObject *py_track(PyObject *self, PyObject *rec);                                    /* lazy.c */
PyObject *py_unseal(PyObject *self, PyObject *entry);                                 /* lazy.c */
PyObject *py_tar_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);     /* tar_record.c */

static inline int set_slot(PyObject *obj, int slot, PyObject *value)
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

/* A new reference to a slot of a LazyRecord (read where the descriptor would). */
static inline PyObject *get_slot(PyObject *obj, int slot)
{
    PyObject *v = *(PyObject **)((char *)obj + slot_at[slot]);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "LazyRecord has no %s", slot_names[slot]);
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

static inline int alignment_ok(long alignment) { return alignment >= 8 && alignment <= MAX_ZERO_PAD && !(alignment & (alignment - 1)); }

/* A new LazyRecord with every slot empty, tracked by the GC (as
   PyType_GenericAlloc makes it). */
static inline PyObject *record_alloc(void)
{
    if (record_free_n == 0)
        return PyType_GenericAlloc((PyTypeObject *)LazyRecord, 0);
    PyObject *rec = record_free[--record_free_n];
    PyObject_Init(rec, (PyTypeObject *)LazyRecord); /* a reference of its own; one to its (heap) type */
    PyObject_GC_Track(rec);
    return rec;
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SHARDCAT_CCODEC_H */
