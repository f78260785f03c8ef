/* Local batch reads: pread_linked (the point lookup's one read, with the
 * file's link count) and read_packed (a batch's records read from local
 * files into packed buffers with preadv; _pread.read_packed is the
 * reference). */
#include "ccodec.h"

#ifdef HAVE_PREAD_LINKED
/* pread_linked(fd, n, offset) -> bytes, or None if the file has no name left

   The point lookup's read (format/sources.py has its reference): whether the
   open file still has a name (fstat's st_nlink), then one pread of up to n
   bytes at offset, with the GIL released once for both and no stat_result
   built (os.fstat's object cost more than the read itself). A short read is
   returned short; an error is the OSError os.pread or os.fstat raises. */
PyObject *py_pread_linked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
   open until this returns (FileSource.held), since one closed
   meanwhile and its number reused by another open would read another file. */

#define PACKED_MAX_GAP (1 << 20)

int pread_whole(int fd, char *dest, uint64_t length, uint64_t offset, int *err)
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
   2-core VMs), since the allocator hands the freed memory back
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

PyObject *py_read_packed(PyObject *self, PyObject *args)
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


