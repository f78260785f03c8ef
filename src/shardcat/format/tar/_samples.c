/*
 * From the walk's members to the scan's record and entry rows, in C (the second
 * unit of the _ctar module: it uses _ctar.c's scan() and Found, declared in _ctar.h).
 *
 * walk_block() is walk() with the members kept in one C block (Members)
 * instead of five Python lists: names copied out of the reused chunk buffer,
 * offsets, sizes and CRCs as C integers. Grouper.feed(block) then groups
 * them into WebDataset samples (scan.py's _Grouper is the reference) and
 * writes the native footer's rows (RECORD_ROW_DTYPE, ENTRY_ROW_DTYPE) with
 * each key's xxHash64 (the vendored xxhash.h), without the GIL and without
 * a Python object per member.
 *
 * As in walk(): this code raises none of the archive's errors. feed() stops
 * in front of a member whose name is off WebDataset's plain path (no dot, a
 * leading '_', a newline, a non-ASCII byte: scan.py splits it and calls
 * add()), and in front of a member the grouping rejects (a key seen before,
 * a repeated entry name, a key or an entry count above the format's limits),
 * returning a short tuple from which scan.py raises the reference's error.
 * The checks run before anything is changed, so a rejected member leaves
 * the grouper as it was; so does a MemoryError (the room is taken first).
 *
 * Threads: every Grouper method holds the grouper's lock (feed() through
 * its GIL-free part), so two threads feeding or taking at once wait for
 * each other; a call from inside another on the same thread is refused.
 */
#include "_ctar.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the record and entry rows are written in native order, which must be little-endian"
#endif

#define XXH_INLINE_ALL
#define XXH_NO_XXH3
#include "../../_vendor/xxhash/xxhash.h"

/* The format's limits and row layouts: format/spec.py declares them; tests/format/test_c_layout.py checks these. */
#define MAX_KEY_BYTES 0xFFFF
#define MAX_ENTRIES 0xFFFF
#define MAX_SPECS 0x10000

typedef struct {
    uint64_t offset, length, key_hash;
    uint16_t key_length, entry_count;
    uint32_t reserved;
} RecordRow;
typedef struct {
    uint64_t offset, size;
    uint32_t crc;
    uint16_t spec, reserved;
} EntryRow;
_Static_assert(sizeof(RecordRow) == 32, "RECORD_ROW_DTYPE is 32 bytes");
_Static_assert(sizeof(EntryRow) == 24, "ENTRY_ROW_DTYPE is 24 bytes");

/* A growable array of fixed-size items (or bytes, with item 1). */
typedef struct {
    char *data;
    size_t len, cap, item;
} Vec;

/* Room for `more` items after the `len` there are; -1: no memory (nothing changed). Leaves
   `data` allocated even for 0 items, so that vec_grow() never answers NULL but for memory. */
static int vec_reserve(Vec *v, size_t more)
{
    if (v->item == 0 || more > ((size_t)-1 >> 1) / v->item - v->len)
        return -1; /* no item size (never set up), or a size no allocation can hold */
    if (v->data != NULL && v->len + more <= v->cap)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->len + more)
        cap *= 2;
    char *data = PyMem_RawRealloc(v->data, cap * v->item);
    if (data == NULL)
        return -1;
    v->data = data;
    v->cap = cap;
    return 0;
}

/* The `more` items added at the end (uninitialised), or NULL with nothing changed: no memory. */
static void *vec_grow(Vec *v, size_t more)
{
    if (vec_reserve(v, more) < 0)
        return NULL;
    void *at = v->data + v->len * v->item;
    v->len += more;
    return at;
}

static void vec_free(Vec *v)
{
    PyMem_RawFree(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Members: the walk's members in one block                                  */

typedef struct {
    uint64_t first, payload, size, name_at;
    uint32_t crc, name_len;
} MemberRow;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    MemberRow *rows;
    char *names;
} Members;

static void members_dealloc(Members *self)
{
    PyMem_RawFree(self->rows);
    PyMem_RawFree(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t members_len(Members *self) { return self->n; }

static PyObject *member_tuple(const Members *b, Py_ssize_t i)
{
    const MemberRow *r = &b->rows[i];
    return Py_BuildValue("(y#KKKk)", b->names + r->name_at, (Py_ssize_t)r->name_len,
                         (unsigned long long)r->first, (unsigned long long)r->payload,
                         (unsigned long long)r->size, (unsigned long)r->crc);
}

static PyObject *members_member(Members *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "member index out of range");
        return NULL;
    }
    return member_tuple(self, i);
}

/* The five columns of walk(): names, first header offsets, payload offsets, sizes, CRCs. */
static PyObject *members_columns(Members *self, PyObject *unused)
{
    (void)unused;
    PyObject *cols[5] = {NULL};
    for (int c = 0; c < 5; c++)
        if ((cols[c] = PyList_New(self->n)) == NULL)
            goto fail;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        const MemberRow *r = &self->rows[i];
        PyObject *items[5] = {
            PyBytes_FromStringAndSize(self->names + r->name_at, (Py_ssize_t)r->name_len),
            PyLong_FromUnsignedLongLong(r->first), PyLong_FromUnsignedLongLong(r->payload),
            PyLong_FromUnsignedLongLong(r->size), PyLong_FromUnsignedLong(r->crc)};
        int bad = 0;
        for (int c = 0; c < 5; c++) {
            if (items[c] == NULL)
                bad = 1;
            else
                PyList_SET_ITEM(cols[c], i, items[c]);
        }
        if (bad)
            goto fail;
    }
    return Py_BuildValue("(NNNNN)", cols[0], cols[1], cols[2], cols[3], cols[4]);
fail:
    for (int c = 0; c < 5; c++)
        Py_XDECREF(cols[c]);
    return NULL;
}

static PyMethodDef members_methods[] = {
    {"member", (PyCFunction)members_member, METH_O,
     "member(i) -> (name, first_header, payload_offset, size, crc32c)"},
    {"columns", (PyCFunction)members_columns, METH_NOARGS,
     "columns() -> (names, first_headers, payload_offsets, sizes, crc32cs), as walk() returns them"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods members_as_sequence = {.sq_length = (lenfunc)members_len};

static PyTypeObject MembersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardcat.format.tar._ctar.Members",
    .tp_basicsize = sizeof(Members),
    .tp_dealloc = (destructor)members_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Regular members found by walk_block(), in archive order (opaque; see Grouper.feed).",
    .tp_methods = members_methods,
    .tp_as_sequence = &members_as_sequence,
};

/* Copy scan()'s members (whose names point into the chunk) into a block; no GIL needed. */
static int members_fill(Members *b, const Found *found, Py_ssize_t n)
{
    size_t names = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        names += found[i].name_len + (found[i].prefix ? found[i].prefix_len + 1 : 0);
    b->rows = PyMem_RawMalloc(sizeof(MemberRow) * (size_t)(n ? n : 1));
    b->names = PyMem_RawMalloc(names ? names : 1);
    if (b->rows == NULL || b->names == NULL)
        return -1;
    size_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Found *f = &found[i];
        MemberRow *r = &b->rows[i];
        r->name_at = at;
        if (f->prefix != NULL) {
            memcpy(b->names + at, f->prefix, f->prefix_len);
            at += f->prefix_len;
            b->names[at++] = '/';
        }
        memcpy(b->names + at, f->name, f->name_len);
        at += f->name_len;
        r->name_len = (uint32_t)(at - r->name_at);
        r->first = (uint64_t)f->first;
        r->payload = (uint64_t)f->payload;
        r->size = (uint64_t)f->size;
        r->crc = f->crc;
    }
    b->n = n;
    return 0;
}

PyObject *py_walk_block(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end;
    long long base, expected;
    PyObject *global_obj, *result = NULL, *global_out = NULL;
    Members *block = NULL;
    Found *found = NULL;
    if (!PyArg_ParseTuple(args, "y*nnLLO", &view, &start, &end, &base, &expected, &global_obj))
        return NULL;
    ScanState st = {0};
    if (start < 0 || end < start || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "walk_block: start and end must lie inside the buffer");
        goto done;
    }
    if (global_obj != Py_None) {
        if (!PyBytes_Check(global_obj)) {
            PyErr_SetString(PyExc_TypeError, "walk_block: global_path must be bytes or None");
            goto done;
        }
        st.global = (const unsigned char *)PyBytes_AS_STRING(global_obj);
        st.global_len = PyBytes_GET_SIZE(global_obj);
    }
    const unsigned char *global_in = st.global;
    block = PyObject_New(Members, &MembersType);
    if (block == NULL)
        goto done;
    block->n = 0;
    block->rows = NULL;
    block->names = NULL;
    found = PyMem_RawMalloc(sizeof(Found) * (size_t)((end - start) / BLOCK + 1));
    if (found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    /* As in walk(): the buffer stays put while `view` holds it. */
    Py_BEGIN_ALLOW_THREADS
    scan(view.buf, start, end, base, expected, &st, found);
    rc = members_fill(block, found, st.found);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (st.global != global_in)
        global_out = PyBytes_FromStringAndSize((const char *)st.global, st.global_len);
    else
        global_out = Py_NewRef(global_obj);
    if (global_out == NULL)
        goto done;
    result = Py_BuildValue("(nllOO)", st.committed, st.members, st.skipped, global_out,
                           st.found ? (PyObject *)block : Py_None);
done:
    PyMem_RawFree(found);
    Py_XDECREF(global_out);
    Py_XDECREF(block);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------ */
/* Grouper: members to sample rows                                           */

/* An open-addressing set of items (closed keys, entry names), by hash. */
typedef struct {
    uint64_t hash;
    uint64_t item; /* index + 1; 0: empty */
} Slot;

typedef struct {
    uint64_t at, start; /* key bytes in the arena; the record's first byte */
    uint32_t len;
} SeenKey;

typedef struct {
    uint64_t at;
    uint32_t len;
} Name;

typedef struct {
    PyObject_HEAD
    Vec records;   /* RecordRow, closed and not yet taken */
    Vec entries;   /* EntryRow, the taken ones' dropped */
    Vec arena;     /* every closed key's bytes, in order (never dropped: `seen` points in) */
    Vec seen;      /* SeenKey */
    Slot *seen_slots;
    size_t seen_mask;
    Vec names;     /* Name: distinct entry names, in first-seen order (spec ids) */
    Vec name_bytes;
    Slot *name_slots;
    size_t name_mask;
    size_t taken_arena; /* arena bytes of keys already taken */
    /* the open sample */
    int open;
    Vec key; /* its key's bytes */
    uint64_t key_hash, start, end;
    size_t first_entry; /* its first row in `entries` */
    Vec lower; /* scratch: a lower-cased entry name */
    Vec parsed; /* scratch: Parsed, per member of the block fed */
    /* Held by every method: feed() changes all of the above without the GIL, so a second
       thread must wait for it (grouper_lock) rather than read or grow the same arrays. */
    PyThread_type_lock lock;
    unsigned long owner; /* the thread holding `lock` (0: none): a re-entrant call is refused */
} Grouper;

typedef enum { G_OK = 0, G_SPLIT, G_DUPLICATE, G_LONG_KEY, G_MANY, G_NAMES, G_MEMORY } GStatus;

static int slots_grow(Slot **slots, size_t *mask, size_t count)
{
    /* Keep the load under one half. */
    if (*slots != NULL && (count + 1) * 2 <= *mask + 1)
        return 0;
    size_t cap = *slots ? (*mask + 1) * 2 : 1024;
    Slot *fresh = PyMem_RawCalloc(cap, sizeof(Slot));
    if (fresh == NULL)
        return -1;
    if (*slots != NULL) {
        for (size_t i = 0; i <= *mask; i++) {
            if ((*slots)[i].item == 0)
                continue;
            size_t j = (size_t)(*slots)[i].hash & (cap - 1);
            while (fresh[j].item)
                j = (j + 1) & (cap - 1);
            fresh[j] = (*slots)[i];
        }
        PyMem_RawFree(*slots);
    }
    *slots = fresh;
    *mask = cap - 1;
    return 0;
}

/* The seen key equal to key[:len] (hash h), or NULL. */
static const SeenKey *seen_find(const Grouper *g, const char *key, size_t len, uint64_t h)
{
    if (g->seen_slots == NULL)
        return NULL;
    for (size_t j = (size_t)h & g->seen_mask; g->seen_slots[j].item; j = (j + 1) & g->seen_mask) {
        if (g->seen_slots[j].hash != h)
            continue;
        const SeenKey *s = (const SeenKey *)g->seen.data + (g->seen_slots[j].item - 1);
        if (s->len == len && memcmp(g->arena.data + s->at, key, len) == 0)
            return s;
    }
    return NULL;
}

/* The spec id of entry name ext[:len], added in first-seen order; -1: no memory, -2: too many. */
static long name_id(Grouper *g, const char *ext, size_t len)
{
    /* A WebDataset tar has a handful of entry names: compare with those before hashing. */
    const Name *names = (const Name *)g->names.data;
    for (size_t i = 0; i < g->names.len && i < 8; i++)
        if (names[i].len == len && memcmp(g->name_bytes.data + names[i].at, ext, len) == 0)
            return (long)i;
    uint64_t h = XXH64(ext, len, 0);
    if (g->name_slots != NULL) {
        for (size_t j = (size_t)h & g->name_mask; g->name_slots[j].item; j = (j + 1) & g->name_mask) {
            if (g->name_slots[j].hash != h)
                continue;
            const Name *n = (const Name *)g->names.data + (g->name_slots[j].item - 1);
            if (n->len == len && memcmp(g->name_bytes.data + n->at, ext, len) == 0)
                return (long)(g->name_slots[j].item - 1);
        }
    }
    if (g->names.len >= MAX_SPECS)
        return -2;
    /* All the room first: a failure leaves no half-added name. */
    if (slots_grow(&g->name_slots, &g->name_mask, g->names.len) < 0 ||
        vec_reserve(&g->name_bytes, len) < 0 || vec_reserve(&g->names, 1) < 0)
        return -1;
    size_t at = g->name_bytes.len;
    char *dst = vec_grow(&g->name_bytes, len);
    Name *n = vec_grow(&g->names, 1);
    memcpy(dst, ext, len);
    n->at = at;
    n->len = (uint32_t)len;
    size_t j = (size_t)h & g->name_mask;
    while (g->name_slots[j].item)
        j = (j + 1) & g->name_mask;
    g->name_slots[j].hash = h;
    g->name_slots[j].item = g->names.len;
    return (long)(g->names.len - 1);
}

/* The open sample's limits, checked when it closes (scan.py's _Grouper._close). */
static GStatus close_check(const Grouper *g)
{
    if (!g->open)
        return G_OK;
    if (g->key.len > MAX_KEY_BYTES)
        return G_LONG_KEY;
    if (g->entries.len - g->first_entry > MAX_ENTRIES)
        return G_MANY;
    return G_OK;
}

/* The room closing the open sample takes; -1: no memory (nothing else changed). */
static int reserve_close(Grouper *g)
{
    if (slots_grow(&g->seen_slots, &g->seen_mask, g->seen.len) < 0 ||
        vec_reserve(&g->arena, g->key.len) < 0 || vec_reserve(&g->seen, 1) < 0 ||
        vec_reserve(&g->records, 1) < 0)
        return -1;
    return 0;
}

static GStatus close_open(Grouper *g)
{
    if (!g->open)
        return G_OK;
    /* All the room first: a failure leaves the sample open and nothing half-added. */
    if (reserve_close(g) < 0)
        return G_MEMORY;
    size_t at = g->arena.len;
    char *dst = vec_grow(&g->arena, g->key.len);
    SeenKey *s = vec_grow(&g->seen, 1);
    RecordRow *r = vec_grow(&g->records, 1);
    memcpy(dst, g->key.data, g->key.len);
    s->at = at;
    s->len = (uint32_t)g->key.len;
    s->start = g->start;
    size_t j = (size_t)g->key_hash & g->seen_mask;
    while (g->seen_slots[j].item)
        j = (j + 1) & g->seen_mask;
    g->seen_slots[j].hash = g->key_hash;
    g->seen_slots[j].item = g->seen.len;
    r->offset = g->start;
    r->length = g->end - g->start;
    r->key_hash = g->key_hash;
    r->key_length = (uint16_t)g->key.len;
    r->entry_count = (uint16_t)(g->entries.len - g->first_entry);
    r->reserved = 0;
    g->open = 0;
    return G_OK;
}

/* One member of sample key[:key_len] (xxHash64 h), entry ext[:ext_len] (lower-cased):
   _Grouper.feed's steps after the name split. On a rejection nothing is changed; *value is the seen
   sample's offset (G_SPLIT). */
static GStatus group_add(Grouper *g, const char *key, size_t key_len, uint64_t h,
                         const char *ext, size_t ext_len, uint64_t first, uint64_t payload,
                         uint64_t size, uint32_t crc, uint64_t *value)
{
    int same = g->open && g->key.len == key_len && memcmp(g->key.data, key, key_len) == 0;
    /* The room this member takes, before anything changes (the entry, a new key). */
    if (vec_reserve(&g->entries, 1) < 0 || (!same && vec_reserve(&g->key, key_len) < 0))
        return G_MEMORY;
    if (!same) {
        GStatus st = close_check(g);
        if (st != G_OK)
            return st;
        const SeenKey *s = seen_find(g, key, key_len, h);
        if (s != NULL) {
            *value = s->start;
            return G_SPLIT;
        }
        /* Closing the open sample cannot fail once its room is there; the name comes last
           (a new one is added), so a failure leaves nothing half-done. */
        if (g->open && reserve_close(g) < 0)
            return G_MEMORY;
        long id = name_id(g, ext, ext_len);
        if (id < 0)
            return id == -2 ? G_NAMES : G_MEMORY;
        if ((st = close_open(g)) != G_OK)
            return st;
        g->key.len = 0;
        char *dst = vec_grow(&g->key, key_len); /* reserved above: never NULL */
        memcpy(dst, key, key_len);
        g->open = 1;
        g->key_hash = h;
        g->start = first;
        g->first_entry = g->entries.len;
        EntryRow *e = vec_grow(&g->entries, 1); /* reserved above */
        *e = (EntryRow){payload - first, size, crc, (uint16_t)id, 0};
        g->end = payload + size;
        return G_OK;
    }
    long id = name_id(g, ext, ext_len);
    if (id < 0)
        return id == -2 ? G_NAMES : G_MEMORY;
    const EntryRow *rows = (const EntryRow *)g->entries.data;
    for (size_t i = g->first_entry; i < g->entries.len; i++)
        if (rows[i].spec == (uint16_t)id)
            return G_DUPLICATE;
    EntryRow *e = vec_grow(&g->entries, 1); /* reserved above */
    *e = (EntryRow){payload - g->start, size, crc, (uint16_t)id, 0};
    g->end = payload + size;
    return G_OK;
}

/* A rejection as scan.py reads it: ("split", seen_offset), ("duplicate",), ("long_key",
   key_bytes, start), ("many", key, entries, start), ("names",); NULL with MemoryError set. */
static PyObject *status_tuple(const Grouper *g, GStatus st, uint64_t value)
{
    switch (st) {
    case G_SPLIT:
        return Py_BuildValue("(sK)", "split", (unsigned long long)value);
    case G_DUPLICATE:
        return Py_BuildValue("(s)", "duplicate");
    case G_LONG_KEY:
        return Py_BuildValue("(snK)", "long_key", (Py_ssize_t)g->key.len,
                             (unsigned long long)g->start);
    case G_MANY:
        return Py_BuildValue("(ss#nK)", "many", g->key.data, (Py_ssize_t)g->key.len,
                             (Py_ssize_t)(g->entries.len - g->first_entry),
                             (unsigned long long)g->start);
    case G_NAMES:
        return Py_BuildValue("(s)", "names");
    case G_MEMORY:
        return PyErr_NoMemory();
    default:
        Py_RETURN_NONE;
    }
}

/* A member name on WebDataset's plain path: its key is name[:dot]. */
typedef struct {
    uint64_t hash; /* the key's xxHash64 */
    size_t dot;
} Parsed;

/* The key's end in a plain name (the first dot of the basename), or 0 when the name is off
   the plain path (scan.py's inline one: the key up to the first dot of the basename, a
   non-empty entry name after it, no newline, no leading '_', ASCII only). */
static size_t plain_dot(const char *p, size_t len)
{
    Py_ssize_t slash = -1, dot = -1;
    if (len == 0 || p[0] == '_')
        return 0;
    for (size_t j = 0; j < len; j++) {
        unsigned char c = (unsigned char)p[j];
        if (c >= 0x80 || c == '\n')
            return 0;
        if (c == '/') {
            slash = (Py_ssize_t)j;
            dot = -1;
        } else if (c == '.' && dot < 0)
            dot = (Py_ssize_t)j;
    }
    if (dot <= slash + 1 || dot >= (Py_ssize_t)len - 1)
        return 0;
    return (size_t)dot;
}

/* Take the grouper's lock, the GIL held (released while waiting, so that the holder, which may
   be waiting for the GIL, can finish). -1 with RuntimeError: this thread holds it already. */
static int grouper_lock(Grouper *g)
{
    unsigned long me = PyThread_get_thread_ident();
    if (g->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Grouper is not initialised");
        return -1;
    }
    if (g->owner == me) {
        PyErr_SetString(PyExc_RuntimeError, "Grouper is already in use by this thread");
        return -1;
    }
    if (!PyThread_acquire_lock(g->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(g->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    g->owner = me;
    return 0;
}

static void grouper_unlock(Grouper *g)
{
    g->owner = 0;
    PyThread_release_lock(g->lock);
}

/* feed(block, at) -> (stop, rejection or None): group block members from `at` until one
   whose name scan.py must split (rejection None) or one the grouping rejects. */
static PyObject *grouper_feed(Grouper *g, PyObject *args)
{
    Members *b;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!n", &MembersType, &b, &i))
        return NULL;
    if (i < 0)
        i = 0;
    GStatus st = G_OK;
    uint64_t value = 0;
    if (grouper_lock(g) < 0)
        return NULL;
    /* The block cannot change (nothing writes a Members after walk_block) and the call's
       arguments keep it alive; the lock keeps every other thread out of `g`. */
    Py_BEGIN_ALLOW_THREADS
    /* First the names: each new key's hash, and a prefetch of its slot in the seen set (a
       random access in a table of every key so far), then the grouping. */
    Py_ssize_t begin = i, stop = i;
    g->parsed.len = 0;
    Parsed *parsed = i < b->n ? vec_grow(&g->parsed, (size_t)(b->n - i)) : NULL;
    if (i < b->n && parsed == NULL)
        st = G_MEMORY;
    const char *prev = NULL;
    size_t prev_len = 0;
    uint64_t prev_hash = 0;
    for (; parsed != NULL && stop < b->n; stop++) {
        const MemberRow *r = &b->rows[stop];
        const char *p = b->names + r->name_at;
        size_t dot = plain_dot(p, r->name_len);
        if (dot == 0)
            break;
        Parsed *q = &parsed[stop - begin];
        q->dot = dot;
        if (prev != NULL && prev_len == dot && memcmp(prev, p, dot) == 0) {
            q->hash = prev_hash;
            continue;
        }
        q->hash = XXH64(p, dot, 0);
        if (g->seen_slots != NULL)
            __builtin_prefetch(&g->seen_slots[(size_t)q->hash & g->seen_mask]);
        prev = p;
        prev_len = dot;
        prev_hash = q->hash;
    }
    /* Then the grouping, up to the first name scan.py must split (or a rejection). */
    for (; st == G_OK && i < stop; i++) {
        const MemberRow *r = &b->rows[i];
        const char *p = b->names + r->name_at;
        const Parsed *q = &parsed[i - begin];
        size_t ext_len = r->name_len - q->dot - 1;
        g->lower.len = 0;
        char *lower = vec_grow(&g->lower, ext_len);
        if (lower == NULL) {
            st = G_MEMORY;
            break;
        }
        for (size_t j = 0; j < ext_len; j++) {
            char c = p[q->dot + 1 + j];
            lower[j] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
        }
        st = group_add(g, p, q->dot, q->hash, lower, ext_len, r->first, r->payload, r->size,
                       r->crc, &value);
        if (st != G_OK)
            break;
    }
    Py_END_ALLOW_THREADS
    PyObject *status = status_tuple(g, st, value);
    grouper_unlock(g);
    if (status == NULL)
        return NULL;
    return Py_BuildValue("(nN)", i, status);
}

/* add(key, ext, first, payload, size, crc) -> rejection or None: one member whose name
   scan.py split (key and lower-cased entry name as str). */
static PyObject *grouper_add(Grouper *g, PyObject *args)
{
    const char *key, *ext;
    Py_ssize_t key_len, ext_len;
    unsigned long long first, payload, size;
    unsigned long crc;
    if (!PyArg_ParseTuple(args, "s#s#KKKk", &key, &key_len, &ext, &ext_len, &first, &payload,
                          &size, &crc))
        return NULL;
    uint64_t value = 0;
    if (grouper_lock(g) < 0)
        return NULL;
    GStatus st = group_add(g, key, (size_t)key_len, XXH64(key, (size_t)key_len, 0), ext,
                           (size_t)ext_len, first, payload, size, (uint32_t)crc, &value);
    PyObject *status = status_tuple(g, st, value);
    grouper_unlock(g);
    return status;
}

/* finish() -> rejection or None: close the open sample. */
static PyObject *grouper_finish(Grouper *g, PyObject *unused)
{
    (void)unused;
    if (grouper_lock(g) < 0)
        return NULL;
    GStatus st = close_check(g);
    if (st == G_OK)
        st = close_open(g);
    PyObject *status = status_tuple(g, st, 0);
    grouper_unlock(g);
    return status;
}

/* take() -> (records, entries, keys): the closed samples not taken yet, as RECORD_ROW_DTYPE
   and ENTRY_ROW_DTYPE bytes and their keys; forgets their rows (not their keys). */
static PyObject *grouper_take_locked(Grouper *g)
{
    size_t n = g->records.len;
    size_t m = g->open ? g->first_entry : g->entries.len;
    PyObject *keys = PyList_New((Py_ssize_t)n);
    if (keys == NULL)
        return NULL;
    const RecordRow *rows = (const RecordRow *)g->records.data;
    size_t at = g->taken_arena;
    for (size_t i = 0; i < n; i++) {
        PyObject *k = PyUnicode_DecodeUTF8(g->arena.data + at, rows[i].key_length, NULL);
        if (k == NULL) {
            Py_DECREF(keys);
            return NULL;
        }
        PyList_SET_ITEM(keys, (Py_ssize_t)i, k);
        at += rows[i].key_length;
    }
    PyObject *records = PyByteArray_FromStringAndSize(g->records.data ? g->records.data : "",
                                                      (Py_ssize_t)(n * sizeof(RecordRow)));
    PyObject *entries = PyByteArray_FromStringAndSize(g->entries.data ? g->entries.data : "",
                                                      (Py_ssize_t)(m * sizeof(EntryRow)));
    if (records == NULL || entries == NULL) {
        Py_XDECREF(records);
        Py_XDECREF(entries);
        Py_DECREF(keys);
        return NULL;
    }
    g->taken_arena = at;
    g->records.len = 0;
    if (m) {
        memmove(g->entries.data, g->entries.data + m * sizeof(EntryRow),
                (g->entries.len - m) * sizeof(EntryRow));
        g->entries.len -= m;
        g->first_entry -= m;
    }
    return Py_BuildValue("(NNN)", records, entries, keys);
}

static PyObject *grouper_take(Grouper *g, PyObject *unused)
{
    (void)unused;
    if (grouper_lock(g) < 0)
        return NULL;
    PyObject *out = grouper_take_locked(g);
    grouper_unlock(g);
    return out;
}

/* names() -> the entry names in spec-id order (first seen first). */
static PyObject *grouper_names(Grouper *g, PyObject *unused)
{
    (void)unused;
    if (grouper_lock(g) < 0)
        return NULL;
    PyObject *out = PyList_New((Py_ssize_t)g->names.len);
    const Name *names = (const Name *)g->names.data;
    for (size_t i = 0; out != NULL && i < g->names.len; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(g->name_bytes.data + names[i].at, names[i].len, NULL);
        if (s == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, s);
    }
    grouper_unlock(g);
    return out;
}

/* Every field set here, not in __init__: Grouper.__new__(Grouper) alone must give a grouper
   whose arrays have their item sizes (with 0, the first growth allocated 0 bytes). */
static PyObject *grouper_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    Grouper *g = (Grouper *)type->tp_alloc(type, 0); /* zeroed */
    if (g == NULL)
        return NULL;
    g->records.item = sizeof(RecordRow);
    g->entries.item = sizeof(EntryRow);
    g->seen.item = sizeof(SeenKey);
    g->names.item = sizeof(Name);
    g->parsed.item = sizeof(Parsed);
    g->arena.item = g->name_bytes.item = g->key.item = g->lower.item = 1;
    g->lock = PyThread_allocate_lock();
    if (g->lock == NULL) {
        Py_DECREF(g);
        return PyErr_NoMemory();
    }
    return (PyObject *)g;
}

static int grouper_init(Grouper *g, PyObject *args, PyObject *kwds)
{
    (void)g;
    static char *kwlist[] = {NULL};
    return PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist) ? 0 : -1;
}

static void grouper_dealloc(Grouper *g)
{
    Vec *vecs[] = {&g->records, &g->entries,    &g->arena, &g->seen,  &g->names,
                   &g->name_bytes, &g->key, &g->lower, &g->parsed};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++)
        vec_free(vecs[i]);
    PyMem_RawFree(g->seen_slots);
    PyMem_RawFree(g->name_slots);
    if (g->lock != NULL)
        PyThread_free_lock(g->lock);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyMethodDef grouper_methods[] = {
    {"feed", (PyCFunction)grouper_feed, METH_VARARGS,
     "feed(block, at) -> (stop, rejection): group a Members block's members from `at`."},
    {"add", (PyCFunction)grouper_add, METH_VARARGS,
     "add(key, ext, first, payload, size, crc) -> rejection: one member split by scan.py."},
    {"finish", (PyCFunction)grouper_finish, METH_NOARGS, "finish() -> rejection: close the open sample."},
    {"take", (PyCFunction)grouper_take, METH_NOARGS,
     "take() -> (records, entries, keys): closed samples' rows (bytearrays) and keys."},
    {"names", (PyCFunction)grouper_names, METH_NOARGS, "names() -> entry names by spec id."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GrouperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardcat.format.tar._ctar.Grouper",
    .tp_basicsize = sizeof(Grouper),
    .tp_dealloc = (destructor)grouper_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Members to WebDataset sample rows (scan.py's _Grouper is the reference).",
    .tp_methods = grouper_methods,
    .tp_init = (initproc)grouper_init,
    .tp_new = grouper_new,
};

int add_sample_types(PyObject *m)
{
    if (PyType_Ready(&MembersType) < 0 || PyType_Ready(&GrouperType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Members", (PyObject *)&MembersType) < 0 ||
        PyModule_AddObjectRef(m, "Grouper", (PyObject *)&GrouperType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_KEY_BYTES", MAX_KEY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ENTRIES", MAX_ENTRIES) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_ROW_SIZE", sizeof(RecordRow)) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_ROW_SIZE", sizeof(EntryRow)) < 0)
        return -1;
    return 0;
}
