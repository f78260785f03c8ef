/*
 * The compiled point lookup: Catalog.get(dataset, key) of the
 * latest version's whole record on a file-backed SQLite catalog, in one C
 * call: the key's xxHash64, one step of the lookup's own prepared statement
 * (the SQL text lookup.py builds, so the statement alone decides which
 * records are visible), the shard's cached URL and descriptor, one pread,
 * then the record codec's decode_spanned. point.py is the Python side.
 *
 * Tar shards take the same statement, cache and pread; the
 * layout's entry names (cached per layout id; point.py's TarFinisher fills
 * the cache on a miss), the bytes and the row's spans then go to the record
 * codec's tar_record (read_tar_record compiled, which checks every CRC32C
 * and returns None where the Python function would raise).
 *
 * A key with column groups has one row per group (up to MAX_ROWS): each
 * row's record is read and decoded the same way, in group order (the
 * shard cache's `groups`), then merge() (MergedRecord) merges them.
 *
 * A hash-only dataset (keys="hash": no key text in the catalog, docs/CATALOG.md
 * "Hash-only datasets") is one in `hash_datasets` (the lookup's set of those it
 * has found): its own statement (`hashed`, bound as dataset and hash) gives
 * every candidate row of the key's hash, and each candidate's record is read
 * the same way and kept only if its head names the asked key (two keys of one
 * hash are legal: a collision). See get_hashed().
 *
 * Anything this code does not expect (no row, more rows than MAX_ROWS or
 * no merge given, a shard whose group is not cached, any SQLite result code but a
 * row, a shard not cached or neither native nor tar, no open descriptor, a short or
 * failed read, a record the decoder rejects) returns None, "not handled":
 * the caller then runs the Python path, which asks again and raises the
 * errors. One implementation of the errors and of recovery, in Python.
 *
 * Which SQLite: never a copy linked here (two copies of SQLite in one
 * process break its POSIX locks: sqlite.org/howtocorrupt.html 2.2.1). The
 * functions are looked up at run time in the library Python's own _sqlite3
 * module uses (bind()); where they cannot be found the fast path is off.
 * The prototypes are declared here, so building needs no sqlite3.h.
 *
 * Which connection: its own, read-only, opened on the file the lookup's
 * Python connection has open (not borrowed: the sqlite3* inside a Python
 * sqlite3.Connection is not public API). One per thread's lookup, used by
 * that thread alone (the `busy` flag refuses reentry and defers a close
 * asked for by another thread), never by a forked child (the fork count).
 *
 * Lifetimes: the statement, the connection, the descriptors in
 * `fds` and the lookup's Python connection (the tar finisher's) are used
 * without the GIL, and Catalog.get calls get() without taking the lookup's
 * gate (lookup.py: Lookup.gate; a lock per lookup costs ~7 % of its
 * instructions). So a call marks itself instead, for its whole length:
 * `busy` (the calling thread) makes close() defer this object's own handles
 * to the call's end and tells Lookup.close() to wait for it before closing
 * the files and the connection; `inflight`, the calls in flight in the
 * process, is what a fork waits for after hold(True) has turned new calls
 * away (catalog/fence.py: SQLite's process-wide mutexes must be free at a
 * fork). The lookup's own thread closes a descriptor (an evicted or replaced
 * shard) only between its calls, so a number read from `fds` with the GIL
 * is this shard's file until the pread returns. Every flag and count is
 * read and written with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include "../_vendor/xxhash/xxhash.h"
/* The record head's layout (HEAD_SIZE, DESC_SIZE, RECORD_TAG, the key's fields), declared once. */
#include "../format/ccodec/layout.h"

/* The few SQLite constants and prototypes used (sqlite3.h's values, stable ABI). */
#define SQLITE_OK 0
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_INTEGER 1
#define SQLITE_TEXT 3
#define SQLITE_BLOB 4
#define SQLITE_NULL 5
#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define SQLITE_STATIC ((void (*)(void *))0)

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

typedef struct {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close_v2)(sqlite3 *);
    int (*busy_timeout)(sqlite3 *, int);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*finalize)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_int64)(sqlite3_stmt *, int, long long);
    int (*step)(sqlite3_stmt *);
    int (*column_count)(sqlite3_stmt *);
    int (*column_type)(sqlite3_stmt *, int);
    long long (*column_int64)(sqlite3_stmt *, int);
    const void *(*column_blob)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    const char *(*errmsg)(sqlite3 *);
    int (*libversion_number)(void);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
} Api;

static const char *const API_NAMES[] = {
    "sqlite3_open_v2", "sqlite3_close_v2", "sqlite3_busy_timeout", "sqlite3_prepare_v2",
    "sqlite3_finalize", "sqlite3_reset", "sqlite3_bind_text", "sqlite3_bind_int64",
    "sqlite3_step", "sqlite3_column_count", "sqlite3_column_type", "sqlite3_column_int64",
    "sqlite3_column_blob", "sqlite3_column_bytes", "sqlite3_errmsg", "sqlite3_libversion_number",
    "sqlite3_column_text",
};
#define API_COUNT (sizeof(API_NAMES) / sizeof(API_NAMES[0]))

/* The functions bound last (NULL: none). Each Point keeps the table it was
   opened with; tables are never freed (a few dozen bytes per bind()). */
static const Api *api;

/* Incremented in a forked child: a Point opened before the fork is the parent's. */
static unsigned long forks;
/* Calls of get() and rows() in flight, and whether new ones are turned away (hold()). */
static long inflight;
static int holding;
/* The key hash's bits kept (narrow_key_hashes(): forced collisions in tests; all by default). */
static unsigned long long key_hash_mask = ~0ULL;
static void after_fork_in_child(void)
{
    forks++;
    inflight = 0; /* their threads are the parent's */
}

#define SPANS_INLINE 1024

typedef struct {
    PyObject_HEAD
    const Api *api;
    sqlite3 *db;
    sqlite3_stmt *stmt;
    sqlite3_stmt *batch; /* the batch statement (rows()), or NULL */
    sqlite3_stmt *hashed; /* a hash-only dataset's candidates (bound dataset, hash), or NULL */
    sqlite3_stmt *hash_batch; /* the batch statement with each row's key hash (rows(..., 1)), or NULL */
    unsigned long forks; /* `forks` when opened */
    unsigned long busy;  /* the thread inside get() or rows(), or 0 */
    int close_pending;   /* close() asked while busy: get() closes on its way out */
    Py_ssize_t one_pread;
    PyObject *shards; /* dict: shard id -> (url, alignment), or None for other kinds */
    PyObject *tars;   /* dict: shard id -> url of a tar shard (its `shards` value is None) */
    PyObject *finish; /* callable(layout id): a tar layout's (name, content type) pairs, or None */
    PyObject *tar_specs;  /* dict: layout id -> those pairs (finish.specs, filled by finish) */
    PyObject *tar_record; /* the record codec's tar_record (finish.decode) */
    PyObject *record;     /* the Record class (finish.record) */
    PyObject *fds;    /* dict: url -> descriptor of the open local file */
    PyObject *touch;  /* callable(url): the source cache's LRU mark */
    PyObject *unpack; /* spans.unpack_spans, for decode_spanned */
    PyObject *texts;  /* the lookup's memo of entry names and types */
    PyObject *merge;  /* callable(key, parts): a key's records in group order merged (MergedRecord) */
    PyObject *groups; /* dict: shard id -> its column group (0: the base), filled with `shards` */
    PyObject *hash_datasets; /* set: the lookup's hash-only datasets (get() takes `hashed`), or NULL */
} Point;

static void point_release(Point *self)
{
    /* A child never finalizes or closes the parent's handles (their locks and
       WAL index are the parent's): it drops them. */
    if (self->forks == forks && self->api != NULL) {
        if (self->stmt != NULL)
            self->api->finalize(self->stmt);
        if (self->batch != NULL)
            self->api->finalize(self->batch);
        if (self->hashed != NULL)
            self->api->finalize(self->hashed);
        if (self->hash_batch != NULL)
            self->api->finalize(self->hash_batch);
        if (self->db != NULL)
            self->api->close_v2(self->db);
    }
    self->stmt = NULL;
    self->batch = NULL;
    self->hashed = NULL;
    self->hash_batch = NULL;
    self->db = NULL;
}

static int point_init(Point *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "sql", "busy_timeout_ms", "cache_size", "shards", "fds", "touch",
                             "unpack", "texts", "one_pread", "tars", "finish", "batch_sql", "merge", "groups",
                             "hash_sql", "hash_datasets", "mmap_size", "hash_batch_sql", NULL};
    const char *path, *sql, *batch_sql = NULL, *hash_sql = NULL, *hash_batch_sql = NULL;
    Py_ssize_t sql_len, batch_len = 0, hash_len = 0, hash_batch_len = 0;
    int busy_ms;
    long long cache_size, mmap_size = 0;
    PyObject *shards, *fds, *touch, *unpack, *texts, *tars, *finish, *merge = Py_None, *groups = Py_None,
             *hash_datasets = Py_None;
    Py_ssize_t one_pread;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss#iLO!O!OOO!nO!O|z#OOz#OLz#", kwlist, &path, &sql,
                                     &sql_len, &busy_ms, &cache_size, &PyDict_Type, &shards, &PyDict_Type,
                                     &fds, &touch, &unpack, &PyDict_Type, &texts, &one_pread, &PyDict_Type,
                                     &tars, &finish, &batch_sql, &batch_len, &merge, &groups, &hash_sql,
                                     &hash_len, &hash_datasets, &mmap_size, &hash_batch_sql,
                                     &hash_batch_len))
        return -1;
    if ((hash_sql == NULL) != (hash_datasets == Py_None) ||
        (hash_datasets != Py_None && !PySet_CheckExact(hash_datasets))) {
        PyErr_SetString(PyExc_TypeError, "hash_sql and hash_datasets (a set) are given together, or neither");
        return -1;
    }
    if ((merge == Py_None) != (groups == Py_None) || (groups != Py_None && !PyDict_Check(groups))) {
        PyErr_SetString(PyExc_TypeError, "merge and groups (a dict) are given together, or neither");
        return -1;
    }
    /* The Python connection's page cache size (PRAGMA cache_size: pages, or KiB if negative)
       and memory map (PRAGMA mmap_size: bytes, 0 for none). */
    char pragmas[2][64];
    snprintf(pragmas[0], sizeof pragmas[0], "PRAGMA cache_size = %lld", cache_size);
    snprintf(pragmas[1], sizeof pragmas[1], "PRAGMA mmap_size = %lld", mmap_size);
    if (self->db != NULL || self->shards != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Point is already open");
        return -1;
    }
    if (api == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SQLite's functions were not found (bind() first)");
        return -1;
    }
    const Api *a = api;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL, *batch = NULL, *hashed = NULL, *hash_batch = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = a->open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = a->busy_timeout(db, busy_ms);
    for (int i = 0; i < 2 && rc == SQLITE_OK; i++) {
        rc = a->prepare_v2(db, pragmas[i], -1, &stmt, NULL);
        if (rc == SQLITE_OK && stmt != NULL) {
            a->step(stmt); /* sets it; its result row, if any, is not needed */
            rc = a->finalize(stmt);
        }
        stmt = NULL;
    }
    if (rc == SQLITE_OK)
        rc = a->prepare_v2(db, sql, (int)sql_len + 1, &stmt, NULL);
    if (rc == SQLITE_OK && batch_sql != NULL)
        rc = a->prepare_v2(db, batch_sql, (int)batch_len + 1, &batch, NULL);
    if (rc == SQLITE_OK && hash_sql != NULL)
        rc = a->prepare_v2(db, hash_sql, (int)hash_len + 1, &hashed, NULL);
    if (rc == SQLITE_OK && hash_batch_sql != NULL)
        rc = a->prepare_v2(db, hash_batch_sql, (int)hash_batch_len + 1, &hash_batch, NULL);
    Py_END_ALLOW_THREADS
    if (rc == SQLITE_OK && (stmt == NULL || a->column_count(stmt) != 5)) {
        PyErr_SetString(PyExc_ValueError, "the point statement must select 5 columns");
    } else if (rc == SQLITE_OK && batch_sql != NULL && (batch == NULL || a->column_count(batch) != 9)) {
        PyErr_SetString(PyExc_ValueError, "the batch statement must select 9 columns");
    } else if (rc == SQLITE_OK && hash_sql != NULL && (hashed == NULL || a->column_count(hashed) != 5)) {
        PyErr_SetString(PyExc_ValueError, "the hash-only point statement must select 5 columns");
    } else if (rc == SQLITE_OK && hash_batch_sql != NULL &&
               (hash_batch == NULL || a->column_count(hash_batch) != 10)) {
        PyErr_SetString(PyExc_ValueError, "the batch statement with key hashes must select 10 columns");
    } else if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_RuntimeError, "cannot open %s for point lookups: %s (SQLite code %d)", path,
                     db != NULL ? a->errmsg(db) : "out of memory", rc);
    }
    if (PyErr_Occurred()) {
        if (stmt != NULL)
            a->finalize(stmt);
        if (batch != NULL)
            a->finalize(batch);
        if (hashed != NULL)
            a->finalize(hashed);
        if (hash_batch != NULL)
            a->finalize(hash_batch);
        if (db != NULL)
            a->close_v2(db);
        return -1;
    }
    self->api = a;
    self->db = db;
    self->stmt = stmt;
    self->batch = batch;
    self->hashed = hashed;
    self->hash_batch = hash_batch;
    self->forks = forks;
    self->one_pread = one_pread;
    Py_INCREF(shards), self->shards = shards;
    Py_INCREF(fds), self->fds = fds;
    Py_INCREF(touch), self->touch = touch;
    Py_INCREF(unpack), self->unpack = unpack;
    Py_INCREF(texts), self->texts = texts;
    Py_INCREF(tars), self->tars = tars;
    Py_INCREF(finish), self->finish = finish;
    if (merge != Py_None) {
        Py_INCREF(merge), self->merge = merge;
        Py_INCREF(groups), self->groups = groups;
    }
    if (hashed != NULL)
        Py_INCREF(hash_datasets), self->hash_datasets = hash_datasets;
    self->tar_specs = PyObject_GetAttrString(finish, "specs");
    self->tar_record = self->tar_specs ? PyObject_GetAttrString(finish, "decode") : NULL;
    self->record = self->tar_record ? PyObject_GetAttrString(finish, "record") : NULL;
    if (self->record == NULL)
        return -1;
    if (!PyDict_CheckExact(self->tar_specs)) {
        PyErr_SetString(PyExc_TypeError, "finish.specs must be a dict");
        return -1;
    }
    return 0;
}

static int point_traverse(Point *self, visitproc visit, void *arg)
{
    Py_VISIT(self->shards);
    Py_VISIT(self->fds);
    Py_VISIT(self->touch);
    Py_VISIT(self->unpack);
    Py_VISIT(self->texts);
    Py_VISIT(self->tars);
    Py_VISIT(self->finish);
    Py_VISIT(self->tar_specs);
    Py_VISIT(self->tar_record);
    Py_VISIT(self->record);
    Py_VISIT(self->merge);
    Py_VISIT(self->groups);
    Py_VISIT(self->hash_datasets);
    return 0;
}

static int point_clear(Point *self)
{
    Py_CLEAR(self->shards);
    Py_CLEAR(self->fds);
    Py_CLEAR(self->touch);
    Py_CLEAR(self->unpack);
    Py_CLEAR(self->texts);
    Py_CLEAR(self->tars);
    Py_CLEAR(self->finish);
    Py_CLEAR(self->tar_specs);
    Py_CLEAR(self->tar_record);
    Py_CLEAR(self->record);
    Py_CLEAR(self->merge);
    Py_CLEAR(self->groups);
    Py_CLEAR(self->hash_datasets);
    return 0;
}

static void point_dealloc(Point *self)
{
    PyObject_GC_UnTrack(self);
    point_release(self);
    point_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The row's columns, copied out before the statement is reset. */
typedef struct {
    long long shard, offset, length, layout;
    const unsigned char *spans;
    int spans_len;
    unsigned char inline_spans[SPANS_INLINE];
    unsigned char *heap_spans;
} Row;

/* The most rows (the base and its column groups) one get() merges itself;
   a key with more is the Python path's. */
#define MAX_ROWS 8

/* Steps the statement `st` for (dataset, hash, key) and resets it, without
   the GIL; key NULL: the hash-only statement (`hashed`, no key parameter),
   whose rows are the hash's candidates, one per record (a collision's two
   keys are two rows). The number of rows (1 to MAX_ROWS), each of the expected types,
   copied into rows[]; 0: anything else (no row, more than MAX_ROWS, an
   unexpected type or result code). More than one row is a key with column
   groups (docs/GROUPS.md): one row per group the version sees, merged by
   get(). Without groups the second step only finds the end of the index
   range the first one was already at. The caller frees each row's
   heap_spans (NULL where unused), whatever this returns. */
static int fetch(Point *self, sqlite3_stmt *st, const char *dataset, Py_ssize_t dataset_len, long long hash,
                 const char *key, Py_ssize_t key_len, Row *rows)
{
    const Api *a = self->api;
    int n = 0, rc;
    if (a->bind_text(st, 1, dataset, (int)dataset_len, SQLITE_STATIC) != SQLITE_OK ||
        a->bind_int64(st, 2, hash) != SQLITE_OK ||
        (key != NULL && a->bind_text(st, 3, key, (int)key_len, SQLITE_STATIC) != SQLITE_OK)) {
        a->reset(st);
        return 0;
    }
    while ((rc = a->step(st)) == SQLITE_ROW) {
        if (n == MAX_ROWS || a->column_type(st, 0) != SQLITE_INTEGER ||
            a->column_type(st, 1) != SQLITE_INTEGER || a->column_type(st, 2) != SQLITE_INTEGER ||
            a->column_type(st, 3) != SQLITE_BLOB || a->column_type(st, 4) != SQLITE_INTEGER)
            break;
        Row *row = &rows[n];
        row->shard = a->column_int64(st, 0);
        row->offset = a->column_int64(st, 1);
        row->length = a->column_int64(st, 2);
        row->layout = a->column_int64(st, 4);
        const void *blob = a->column_blob(st, 3);
        int len = a->column_bytes(st, 3);
        unsigned char *dest = len <= SPANS_INLINE ? row->inline_spans : (row->heap_spans = malloc((size_t)len));
        if (dest == NULL || (blob == NULL && len != 0))
            break;
        memcpy(dest, blob, (size_t)len);
        row->spans = dest;
        row->spans_len = len;
        n++;
    }
    /* Ends the statement's read transaction: no snapshot is held between lookups. */
    a->reset(st);
    return rc == SQLITE_DONE ? n : 0;
}

/* A call's start and end (the GIL held): see "Lifetimes" at the top. */
static inline void enter(Point *self)
{
    self->busy = PyThread_get_thread_ident();
    inflight++;
}

static inline void leave(Point *self)
{
    self->busy = 0;
    inflight--;
    if (self->close_pending) {
        point_release(self);
        self->close_pending = 0;
    }
}

/* A hash-only candidate's check (get_found): the asked key's UTF-8 bytes, and
   whether the record turned out to hold another key (set by get_found). */
typedef struct {
    const char *key;
    Py_ssize_t len;
    int other;
} KeyCheck;

static PyObject *get_found(Point *self, PyObject *key, PyObject *decode, Row *row, KeyCheck *check);
static PyObject *get_merged(Point *self, PyObject *key, PyObject *decode, Row *rows, int n);
static PyObject *get_hashed(Point *self, PyObject *key, PyObject *decode, Row *rows, int n, KeyCheck *check);

/* get(dataset, key, decode) -> Record | None

   decode is the record codec's decode_spanned, called as lookup.py calls it.
   None: not handled here (see the top of this file); the caller's Python
   path answers. Errors other than the decoder's (a MemoryError, say) are
   raised. */
static PyObject *point_get(Point *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "get() takes 3 arguments (dataset, key, decode), %zd given", nargs);
        return NULL;
    }
    PyObject *dataset = args[0], *key = args[1], *decode = args[2];
    if (self->db == NULL || self->busy || self->forks != forks || holding || !PyUnicode_CheckExact(dataset) ||
        !PyUnicode_CheckExact(key))
        Py_RETURN_NONE;
    Py_ssize_t dataset_len, key_len;
    const char *d = PyUnicode_AsUTF8AndSize(dataset, &dataset_len);
    const char *k = d == NULL ? NULL : PyUnicode_AsUTF8AndSize(key, &key_len);
    if (k == NULL) { /* not UTF-8 (lone surrogates): the Python path names the key */
        if (!PyErr_ExceptionMatches(PyExc_UnicodeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (dataset_len > INT_MAX || key_len > INT_MAX)
        Py_RETURN_NONE;
    /* A dataset the lookup has found hash-only: its candidates' statement. */
    int hashed = self->hashed == NULL ? 0 : PySet_Contains(self->hash_datasets, dataset);
    if (hashed < 0)
        return NULL;
    long long hash = (long long)(XXH64(k, (size_t)key_len, 0) & key_hash_mask);
    Row rows[MAX_ROWS];
    for (int i = 0; i < MAX_ROWS; i++)
        rows[i].heap_spans = NULL;
    int found;
    enter(self);
    Py_BEGIN_ALLOW_THREADS
    if (hashed)
        found = fetch(self, self->hashed, d, dataset_len, hash, NULL, 0, rows);
    else
        found = fetch(self, self->stmt, d, dataset_len, hash, k, key_len, rows);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    KeyCheck check = {k, key_len, 0};
    if (hashed && found > 0 && !self->close_pending)
        out = get_hashed(self, key, decode, rows, found, &check);
    else if (found == 1 && !self->close_pending)
        out = get_found(self, key, decode, &rows[0], NULL);
    else if (found > 1 && self->merge != NULL && !self->close_pending)
        out = get_merged(self, key, decode, rows, found);
    else
        out = Py_NewRef(Py_None);
    for (int i = 0; i < MAX_ROWS; i++)
        free(rows[i].heap_spans);
    leave(self);
    return out;
}

/* A key with column groups: its rows put in group order (`groups`, the
   shard cache's; stable, as the Python path's sort), each row's record read
   as get_found() reads it (one pread per group), then merge(key, parts)
   (MergedRecord). A shard whose group is not cached, any row not handled, or
   a None from merge is "not handled" for the whole key. pypoint.py's
   merge_point is the Python twin of the ordering. */
static PyObject *get_merged(Point *self, PyObject *key, PyObject *decode, Row *rows, int n)
{
    long long group[MAX_ROWS];
    int order[MAX_ROWS];
    for (int i = 0; i < n; i++) {
        PyObject *id = PyLong_FromLongLong(rows[i].shard);
        if (id == NULL)
            return NULL;
        PyObject *g = PyDict_GetItemWithError(self->groups, id); /* borrowed */
        Py_DECREF(id);
        if (g == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE; /* not cached: the Python path reloads the shard cache */
        }
        group[i] = PyLong_Check(g) ? PyLong_AsLongLong(g) : -1;
        if (group[i] == -1) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError))
                return NULL;
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        /* Insertion sort (n <= MAX_ROWS), stable: equal groups keep the statement's order. */
        int j = i;
        for (; j > 0 && group[order[j - 1]] > group[i]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    PyObject *parts = PyTuple_New(n), *out = NULL;
    if (parts == NULL)
        return NULL;
    for (int k = 0; k < n; k++) {
        PyObject *rec = get_found(self, key, decode, &rows[order[k]], NULL);
        if (rec == NULL)
            goto done;
        PyTuple_SET_ITEM(parts, k, rec);
        if (rec == Py_None || self->close_pending) {
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    {
        PyObject *call[2] = {key, parts};
        out = PyObject_Vectorcall(self->merge, call, 2, NULL);
    }
done:
    Py_DECREF(parts);
    return out;
}

/* A hash-only dataset's candidates (1 to MAX_ROWS rows of the key's hash):
   each one's record read as get_found() reads it, with its head's key
   compared with the asked one first (`check`), and only a record that holds
   the asked key decoded. The one such record is the answer. None, "not
   handled": no candidate holds the key (a missing key, whose hash another
   key has: the Python path raises KeyNotFoundError), two do (never in a
   consistent catalog: one live record per key, and a hash-only dataset has
   no column groups; the Python path answers), or any candidate is not
   handled (not cached, not native, a failed read, a record the decoder
   rejects).
   pypoint.py's PyPoint._hashed is the twin. */
static PyObject *get_hashed(Point *self, PyObject *key, PyObject *decode, Row *rows, int n, KeyCheck *check)
{
    PyObject *match = NULL;
    for (int i = 0; i < n; i++) {
        check->other = 0;
        PyObject *rec = get_found(self, key, decode, &rows[i], check);
        if (rec == NULL) {
            Py_XDECREF(match);
            return NULL;
        }
        if (rec == Py_None && check->other && !self->close_pending) {
            Py_DECREF(rec); /* another key of the same hash: a collision, not this key */
            continue;
        }
        if (rec == Py_None || match != NULL || self->close_pending) {
            Py_XDECREF(match);
            Py_DECREF(rec);
            Py_RETURN_NONE;
        }
        match = rec;
    }
    return match != NULL ? match : Py_NewRef(Py_None);
}

static inline unsigned ld16(const unsigned char *p)
{
    return (unsigned)p[0] | (unsigned)p[1] << 8; /* little-endian, as every field of the format */
}

/* Whether the record in buf (len bytes, read whole) names the key k (k_len
   bytes) in its head: 1 yes, 0 another key (a collision), -1 not a record
   head, or a key running past the bytes read (the decoder's to report: "not
   handled"). Every length is checked before the bytes it covers are read. */
static int head_names_key(const unsigned char *buf, size_t len, const char *k, size_t k_len)
{
    if (len < HEAD_SIZE || memcmp(buf, RECORD_TAG, sizeof RECORD_TAG) != 0)
        return -1;
    size_t held = ld16(buf + HEAD_KEY_LENGTH_AT);
    /* The key follows the head's fixed part and its entries' descriptors. */
    size_t start = HEAD_SIZE + DESC_SIZE * (size_t)ld16(buf + HEAD_ENTRY_COUNT_AT);
    if (start > len || held > len - start)
        return -1;
    return held == k_len && memcmp(buf + start, k, k_len) == 0;
}

/* The rest of get() once the row is found: the shard, the pread, the decoder.
   `check` (a hash-only candidate's, else NULL): only a native record whose
   head names check->key is decoded; one that names another key sets
   check->other and returns None (a tar sample's is not handled). */
static PyObject *get_found(Point *self, PyObject *key, PyObject *decode, Row *row, KeyCheck *check)
{
    PyObject *out = NULL, *data = NULL, *spans = NULL, *id = NULL, *length = NULL, *offset = NULL,
             *layout = NULL;
    if (row->length <= 0 || row->length > self->one_pread || row->offset < 0)
        goto not_handled;
    id = PyLong_FromLongLong(row->shard);
    if (id == NULL)
        goto done;
    PyObject *shard = PyDict_GetItemWithError(self->shards, id); /* borrowed */
    if (shard == NULL && PyErr_Occurred())
        goto done;
    PyObject *url, *alignment;
    int tar = 0;
    if (shard == Py_None) { /* another kind: a tar's URL, or not handled */
        if (check != NULL)
            goto not_handled; /* hash-only datasets hold native shards only */
        url = PyDict_GetItemWithError(self->tars, id); /* borrowed */
        if (url == NULL && PyErr_Occurred())
            goto done;
        if (url == NULL || !PyUnicode_CheckExact(url))
            goto not_handled;
        alignment = Py_None;
        tar = 1;
    } else if (shard == NULL || !PyTuple_CheckExact(shard) || PyTuple_GET_SIZE(shard) != 2) {
        goto not_handled; /* not cached yet */
    } else {
        url = PyTuple_GET_ITEM(shard, 0);
        alignment = PyTuple_GET_ITEM(shard, 1);
    }
    Py_INCREF(url);
    Py_INCREF(alignment);
    PyObject *fd_obj = PyDict_GetItemWithError(self->fds, url); /* borrowed */
    long fd = -1;
    if (fd_obj != NULL && PyLong_CheckExact(fd_obj))
        fd = PyLong_AsLong(fd_obj);
    if (PyErr_Occurred() || fd < 0 || fd > INT_MAX) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            goto not_handled_shard;
        }
        goto done_shard;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)row->length);
    if (data == NULL)
        goto done_shard;
    /* As format/sources.py's pread_linked: a descriptor whose file has no
       name left (deleted or replaced) is not read; the Python path reopens.
       `fd` stays open until the pread returns: see "Lifetimes" at the top. */
    ssize_t got = -1;
    struct stat stt;
    Py_BEGIN_ALLOW_THREADS
    if (fstat((int)fd, &stt) == 0 && stt.st_nlink > 0) {
        do
            got = pread((int)fd, PyBytes_AS_STRING(data), (size_t)row->length, (off_t)row->offset);
        while (got < 0 && errno == EINTR);
    }
    Py_END_ALLOW_THREADS
    if (got != (ssize_t)row->length)
        goto not_handled_shard;
    if (check != NULL) {
        int names = head_names_key((const unsigned char *)PyBytes_AS_STRING(data), (size_t)got, check->key,
                                   (size_t)check->len);
        if (names != 1) {
            check->other = names == 0;
            goto not_handled_shard;
        }
    }
    PyObject *touched = PyObject_CallOneArg(self->touch, url);
    if (touched == NULL)
        goto done_shard;
    Py_DECREF(touched);
    spans = PyBytes_FromStringAndSize((const char *)row->spans, row->spans_len);
    length = PyLong_FromLongLong(row->length);
    offset = PyLong_FromLongLong(row->offset);
    if (spans == NULL || length == NULL || offset == NULL)
        goto done_shard;
    if (tar) {
        layout = PyLong_FromLongLong(row->layout);
        if (layout == NULL)
            goto done_shard;
        /* The layout's entries, cached per id (a layout never changes); the
           finisher asks the catalog on a miss (None: gone, not handled). */
        PyObject *specs = PyDict_GetItemWithError(self->tar_specs, layout); /* borrowed */
        if (specs != NULL) {
            Py_INCREF(specs);
        } else if (!PyErr_Occurred()) {
            specs = PyObject_CallOneArg(self->finish, layout);
        }
        if (specs == Py_None) {
            Py_DECREF(specs);
            goto not_handled_shard;
        }
        if (specs != NULL) {
            PyObject *call[6] = {data, key, specs, spans, offset, self->record};
            out = PyObject_Vectorcall(self->tar_record, call, 6, NULL);
            Py_DECREF(specs);
        }
    } else {
        PyObject *call[9] = {data, key, length, url, offset, alignment, spans, self->unpack, self->texts};
        out = PyObject_Vectorcall(decode, call, 9, NULL);
    }
    if (out == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* A record that does not match the catalog (a CRC32C that differs:
           a tar changed after indexing; or a moved shard's old place): the
           Python path asks again and reports it. */
        PyErr_Clear();
        goto not_handled_shard;
    }
done_shard:
    Py_DECREF(url);
    Py_DECREF(alignment);
done:
    Py_XDECREF(id);
    Py_XDECREF(data);
    Py_XDECREF(spans);
    Py_XDECREF(length);
    Py_XDECREF(offset);
    Py_XDECREF(layout);
    return out;
not_handled_shard:
    Py_DECREF(url);
    Py_DECREF(alignment);
not_handled:
    Py_XDECREF(id);
    Py_XDECREF(data);
    Py_XDECREF(spans);
    Py_XDECREF(length);
    Py_XDECREF(offset);
    Py_XDECREF(layout);
    Py_RETURN_NONE;
}

/* --- rows(): the batch statement's rows ------------------------

   Catalog.get_many's whole records at the latest version: the lookup's own
   batch statement (statements.py's batch_sql, bound as dataset and a JSON array
   of key hashes; with `hashed`, its twin whose rows end with their key hash,
   a hash-only dataset's), stepped here on this connection without the GIL, then
   made into the tuples Python's sqlite3 module would return. What that
   saves per batch: the JSON text of the hashes made
   in Python; a mutex per column value (Python's connection is SQLite's
   serialized mode, this one is opened NOMUTEX); the GIL dropped and taken
   per row; and one str per row for the shard's URL (rows share the
   object). Anything unexpected returns None and the Python path asks again. */

typedef struct {
    long long offset, length, alignment, key_hash; /* key_hash: the hashed statement's */
    size_t url, spans, key, kind, sig; /* into the arena */
    int url_len, spans_len, key_len, kind_len, sig_len; /* key_len, kind_len, sig_len -1: NULL */
} BatchRow;

typedef struct {
    BatchRow *rows;
    size_t n, cap;
    char *bytes;
    size_t used, room;
} Batch;

static int arena_put(Batch *b, const void *src, int len, size_t *at)
{
    if (len < 0)
        return 0;
    if (b->used + (size_t)len > b->room) {
        size_t room = b->room ? b->room : 1 << 16;
        while (room < b->used + (size_t)len)
            room *= 2;
        char *grown = realloc(b->bytes, room);
        if (grown == NULL)
            return 0;
        b->bytes = grown;
        b->room = room;
    }
    if (len > 0)
        memcpy(b->bytes + b->used, src, (size_t)len);
    *at = b->used;
    b->used += (size_t)len;
    return 1;
}

/* A TEXT or BLOB column into the arena (a NULL one as length -1 if nullable). */
static int column_put(const Api *a, sqlite3_stmt *st, int col, int type, int nullable, Batch *b,
                      size_t *at, int *len)
{
    int t = a->column_type(st, col);
    if (t == SQLITE_NULL && nullable) {
        *len = -1;
        *at = 0;
        return 1;
    }
    if (t != type)
        return 0;
    const void *p = type == SQLITE_TEXT ? (const void *)a->column_text(st, col) : a->column_blob(st, col);
    *len = a->column_bytes(st, col);
    if (p == NULL && *len != 0)
        return 0; /* out of memory */
    return arena_put(b, p, *len, at);
}

/* Steps a batch statement (`st`: the batch or the hashed batch) to its end and
   resets it (no GIL held). 1: every row had the expected types and is in *b;
   0: anything else. A key is NULL in a hash-only dataset's rows. */
static int batch_fetch(Point *self, sqlite3_stmt *st, int hashed, const char *dataset,
                       Py_ssize_t dataset_len, const char *json, size_t json_len, Batch *b)
{
    const Api *a = self->api;
    int ok = 0, rc;
    if (a->bind_text(st, 1, dataset, (int)dataset_len, SQLITE_STATIC) != SQLITE_OK ||
        a->bind_text(st, 2, json, (int)json_len, SQLITE_STATIC) != SQLITE_OK) {
        a->reset(st);
        return 0;
    }
    while ((rc = a->step(st)) == SQLITE_ROW) {
        if (b->n == b->cap) {
            size_t cap = b->cap ? b->cap * 2 : 1024;
            BatchRow *grown = realloc(b->rows, cap * sizeof(BatchRow));
            if (grown == NULL)
                break;
            b->rows = grown;
            b->cap = cap;
        }
        BatchRow *r = &b->rows[b->n];
        /* A column group's row (group_id != 0): the Python path merges a key's rows. */
        if (a->column_type(st, 1) != SQLITE_INTEGER || a->column_type(st, 2) != SQLITE_INTEGER ||
            a->column_type(st, 5) != SQLITE_INTEGER || a->column_int64(st, 8) != 0 ||
            (hashed && a->column_type(st, 9) != SQLITE_INTEGER))
            break;
        r->offset = a->column_int64(st, 1);
        r->length = a->column_int64(st, 2);
        r->alignment = a->column_int64(st, 5);
        r->key_hash = hashed ? a->column_int64(st, 9) : 0;
        if (!column_put(a, st, 0, SQLITE_TEXT, 0, b, &r->url, &r->url_len) ||
            !column_put(a, st, 3, SQLITE_BLOB, 0, b, &r->spans, &r->spans_len) ||
            !column_put(a, st, 4, SQLITE_TEXT, 1, b, &r->key, &r->key_len) ||
            !column_put(a, st, 6, SQLITE_TEXT, 1, b, &r->kind, &r->kind_len) ||
            !column_put(a, st, 7, SQLITE_TEXT, 1, b, &r->sig, &r->sig_len))
            break;
        b->n++;
    }
    ok = rc == SQLITE_DONE;
    /* Ends the statement's read transaction: no snapshot is held between batches. */
    a->reset(st);
    return ok;
}

/* Writes n signed 64-bit integers as a JSON array; NULL with an exception set if one is not. */
static char *json_hashes(PyObject *hashes, size_t *len)
{
    Py_ssize_t n = PyList_GET_SIZE(hashes);
    char *out = malloc((size_t)n * 21 + 3), *w = out;
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *w++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(hashes, i);
        long long v = PyLong_CheckExact(item) ? PyLong_AsLongLong(item) : -1;
        if (!PyLong_CheckExact(item) || (v == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "rows(): key hashes must be ints");
            free(out);
            return NULL;
        }
        if (i)
            *w++ = ',';
        unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        char digits[20];
        int k = 0;
        do
            digits[k++] = (char)('0' + u % 10);
        while ((u /= 10) != 0);
        if (v < 0)
            *w++ = '-';
        while (k)
            *w++ = digits[--k];
    }
    *w++ = ']';
    *w = '\0';
    *len = (size_t)(w - out);
    return out;
}

/* A nullable TEXT column as the driver returns it: None (length -1) or a str. */
static PyObject *text_or_none(const char *p, int len)
{
    if (len < 0)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(p, len, NULL);
}

#define URLS_SHARED 64

/* rows(dataset, hashes, hashed=False) -> list[tuple] | None

   hashes: a list of the keys' signed xxHash64 values. Each tuple is the
   batch statement's row (url, offset, length, spans, key, alignment, kind,
   signature, group_id; with `hashed`, the hashed statement's, then key_hash),
   as the Python driver would return it. None: not handled here (no such
   statement, busy, closed, a forked child, a lock, or a row of another
   shape); the caller runs the statement through Python. */
static PyObject *point_rows(Point *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_Format(PyExc_TypeError, "rows() takes 2 or 3 arguments (dataset, hashes, hashed), %zd given",
                     nargs);
        return NULL;
    }
    PyObject *dataset = args[0], *hashes = args[1];
    int hashed = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (hashed < 0)
        return NULL;
    sqlite3_stmt *st = hashed ? self->hash_batch : self->batch;
    if (self->db == NULL || st == NULL || self->busy || self->forks != forks || holding ||
        !PyUnicode_CheckExact(dataset) || !PyList_CheckExact(hashes))
        Py_RETURN_NONE;
    Py_ssize_t dataset_len;
    const char *d = PyUnicode_AsUTF8AndSize(dataset, &dataset_len);
    if (d == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    size_t json_len;
    char *json = json_hashes(hashes, &json_len);
    if (json == NULL)
        return NULL;
    if (dataset_len > INT_MAX || json_len > INT_MAX) {
        free(json);
        Py_RETURN_NONE;
    }
    Batch b = {0};
    int ok;
    enter(self);
    Py_BEGIN_ALLOW_THREADS
    ok = batch_fetch(self, st, hashed, d, dataset_len, json, json_len, &b);
    Py_END_ALLOW_THREADS
    if (self->close_pending) /* closed meanwhile: not handled (leave() clears the mark) */
        ok = 0;
    leave(self); /* the rows are copied out: nothing below uses SQLite */
    free(json);
    PyObject *out = NULL;
    PyObject *urls[URLS_SHARED];
    int shared = 0;
    if (!ok) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    out = PyList_New((Py_ssize_t)b.n);
    if (out == NULL)
        goto done;
    for (size_t i = 0; i < b.n; i++) {
        BatchRow *r = &b.rows[i];
        const char *u = b.bytes + r->url;
        PyObject *url = NULL;
        for (int j = 0; j < shared; j++) {
            if (PyUnicode_GET_LENGTH(urls[j]) <= r->url_len) {
                Py_ssize_t n;
                const char *have = PyUnicode_AsUTF8AndSize(urls[j], &n);
                if (n == r->url_len && memcmp(have, u, (size_t)n) == 0) {
                    url = urls[j];
                    Py_INCREF(url);
                    break;
                }
            }
        }
        if (url == NULL) {
            url = PyUnicode_DecodeUTF8(u, r->url_len, NULL);
            if (url == NULL)
                goto fail;
            if (shared < URLS_SHARED) {
                Py_INCREF(url);
                urls[shared++] = url;
            }
        }
        PyObject *row = PyTuple_New(hashed ? 10 : 9);
        if (row == NULL) {
            Py_DECREF(url);
            goto fail;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, row);
        PyTuple_SET_ITEM(row, 0, url);
        PyObject *v;
        if ((v = PyLong_FromLongLong(r->offset)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 1, v);
        if ((v = PyLong_FromLongLong(r->length)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 2, v);
        if ((v = PyBytes_FromStringAndSize(b.bytes + r->spans, r->spans_len)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 3, v);
        if ((v = text_or_none(b.bytes + r->key, r->key_len)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 4, v);
        if ((v = PyLong_FromLongLong(r->alignment)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 5, v);
        if ((v = text_or_none(b.bytes + r->kind, r->kind_len)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 6, v);
        if ((v = text_or_none(b.bytes + r->sig, r->sig_len)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 7, v);
        /* group_id: always the base's (batch_fetch declines a group's row). */
        if ((v = PyLong_FromLong(0)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 8, v);
        if (hashed) {
            if ((v = PyLong_FromLongLong(r->key_hash)) == NULL)
                goto fail;
            PyTuple_SET_ITEM(row, 9, v);
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
    if (PyErr_ExceptionMatches(PyExc_UnicodeError)) { /* text SQLite holds as not UTF-8: Python's path */
        PyErr_Clear();
        out = Py_None;
        Py_INCREF(out);
    }
done:
    for (int j = 0; j < shared; j++)
        Py_DECREF(urls[j]);
    free(b.rows);
    free(b.bytes);
    return out;
}

static PyObject *point_close(Point *self, PyObject *unused)
{
    if (self->busy)
        self->close_pending = 1; /* a call is in flight: it closes on its way out */
    else
        point_release(self);
    Py_RETURN_NONE;
}

static PyObject *point_closed(Point *self, void *closure)
{
    return PyBool_FromLong(self->db == NULL && !self->close_pending);
}

static PyObject *point_busy(Point *self, void *closure)
{
    return PyLong_FromUnsignedLong(self->busy);
}

static PyMethodDef point_methods[] = {
    {"get", (PyCFunction)(void (*)(void))point_get, METH_FASTCALL,
     "get(dataset, key, decode) -> Record | None: the latest version's whole record, or None if "
     "not handled here."},
    {"rows", (PyCFunction)(void (*)(void))point_rows, METH_FASTCALL,
     "rows(dataset, hashes, hashed=False, /) -> list[tuple] | None: the batch statement's rows "
     "(hashed: the one whose rows end with their key hash), or None if not handled here."},
    {"close", (PyCFunction)point_close, METH_NOARGS,
     "Finalize the statement and close the connection (idempotent)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef point_getset[] = {
    {"closed", (getter)point_closed, NULL, "Whether close() has run.", NULL},
    {"busy", (getter)point_busy, NULL,
     "The ident of the thread inside get() or rows() (threading.get_ident()), or 0.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PointType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardcat.reading._cpoint.Point",
    .tp_basicsize = sizeof(Point),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Point(path, sql, busy_timeout_ms, cache_size, shards, fds, touch, unpack, texts, one_pread, "
              "tars, finish, batch_sql=None, merge=None, groups=None, hash_sql=None, hash_datasets=None, "
              "mmap_size=0, hash_batch_sql=None): "
              "a read-only SQLite connection and the point statement, prepared.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)point_init,
    .tp_dealloc = (destructor)point_dealloc,
    .tp_traverse = (traverseproc)point_traverse,
    .tp_clear = (inquiry)point_clear,
    .tp_methods = point_methods,
    .tp_getset = point_getset,
};

/* bind(library) -> SQLite's version number, or None

   Looks SQLite's functions up in `library` (a path to an object already
   loaded, e.g. _sqlite3.__file__, and the libraries it depends on), or in
   the whole process if None. None if any is missing: then Point() refuses
   to open and the fast path is off. */
static PyObject *py_bind(PyObject *module, PyObject *arg)
{
    const char *path = NULL;
    if (arg != Py_None) {
        path = PyUnicode_AsUTF8(arg);
        if (path == NULL)
            return NULL;
    }
    /* RTLD_NOLOAD: only an object already loaded (never a second SQLite). */
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    Api *table = NULL;
    if (handle != NULL) {
        void **slots = PyMem_RawCalloc(1, sizeof(Api));
        if (slots == NULL)
            return PyErr_NoMemory();
        size_t i;
        for (i = 0; i < API_COUNT; i++) {
            slots[i] = dlsym(handle, API_NAMES[i]);
            if (slots[i] == NULL)
                break;
        }
        if (i == API_COUNT)
            table = (Api *)slots;
        else
            PyMem_RawFree(slots);
        /* The handle stays open while a table uses it; a failed lookup drops it. */
        if (table == NULL)
            dlclose(handle);
    }
    api = table;
    if (table == NULL)
        Py_RETURN_NONE;
    return PyLong_FromLong(table->libversion_number());
}

/* hold(flag): while true, get() and rows() of every Point are not handled (a fork waits). */
static PyObject *py_hold(PyObject *module, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    holding = on;
    Py_RETURN_NONE;
}

/* inflight() -> the calls of get() and rows() in flight in this process. */
static PyObject *py_inflight(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(inflight);
}

/* narrow_key_hashes(mask) -> the previous mask: get() keeps only these bits of a key's hash.
   The test hook shardcat.testing.collisions narrows Python's hash the same way, so
   that the keys a test writes collide here too (with a mask below 2**63 the
   signed value is the low bits themselves, as in Python). */
static PyObject *py_narrow_key_hashes(PyObject *module, PyObject *arg)
{
    unsigned long long mask = PyLong_AsUnsignedLongLong(arg);
    if (mask == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long previous = key_hash_mask;
    key_hash_mask = mask;
    return PyLong_FromUnsignedLongLong(previous);
}

static PyMethodDef module_methods[] = {
    {"bind", py_bind, METH_O, "bind(library) -> SQLite version number or None."},
    {"hold", py_hold, METH_O, "hold(flag): while true, new get() and rows() calls are not handled."},
    {"inflight", py_inflight, METH_NOARGS, "inflight() -> calls of get() and rows() in flight."},
    {"narrow_key_hashes", py_narrow_key_hashes, METH_O,
     "narrow_key_hashes(mask) -> previous mask: get() keeps only these bits of a key's hash (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cpoint", "The compiled SQLite point lookup (see point.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__cpoint(void)
{
    if (PyType_Ready(&PointType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PointType);
    if (PyModule_AddObject(m, "Point", (PyObject *)&PointType) < 0) {
        Py_DECREF(&PointType);
        Py_DECREF(m);
        return NULL;
    }
    static int registered;
    if (!registered && pthread_atfork(NULL, NULL, after_fork_in_child) == 0)
        registered = 1;
    return m;
}
