/* Scatter and gather: bytes laid out in pieces of one buffer, from memory
 * (scatter_copy, gather_copy) or read from files (scatter_read,
 * scatter_read_runs), and crc32c_spans (the CRC32C of many spans of a
 * buffer); format/scatter.py holds the references. */
#include "ccodec.h"

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
PyObject *py_scatter_copy(PyObject *self, PyObject *args)
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
PyObject *py_scatter_read(PyObject *self, PyObject *args)
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
PyObject *py_scatter_read_runs(PyObject *self, PyObject *args)
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
PyObject *py_gather_copy(PyObject *self, PyObject *args)
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
PyObject *py_crc32c_spans(PyObject *self, PyObject *args)
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


