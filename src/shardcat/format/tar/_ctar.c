/*
 * The compiled tar walker: the hot loop of walk.py (TarWalker) over one
 * buffered chunk, in C. walk.py stays the reference and keeps the buffer,
 * the stream and every error; tarwalker.py chooses between the two.
 *
 * walk(buf, start, end, base, expected, global_path) walks the members of
 * buf[start:end] (buf[0] is at file offset `base`) and returns, for every
 * complete member group (its extension headers, its header, its payload
 * and padding all in the buffer), the member's name, first header offset,
 * payload offset, size and the payload's CRC32C, as five lists.
 *
 * How errors are reported, as in the record codec (format/ccodec/): this code raises none of the
 * archive's errors. It stops in front of the first group it does not accept
 * (a bad checksum or number, a pax header it cannot parse, a size past the
 * file's end, a sparse file, the end-of-archive block, a group cut by the
 * end of the buffer) and returns where it stopped; the reference walker then
 * reads that group and raises, or accepts it, with its own message and
 * offset. The rule that makes this sound: this code may reject more than
 * the reference, never accept less. Every header it accepts has its
 * checksum verified first, so no later error can hide an earlier one.
 *
 * CRC32C: SSE4.2 (three interleaved streams, joined by shift tables) when
 * the CPU has it, chosen at import, else slicing-by-8 tables; the same
 * results as the crc32c package (tests/format/tar/test_ctar.py).
 */
#define SC_CRC_DEFINE 1
#include "_ctar.h"

/* ------------------------------------------------------------------------ */
/* header fields                                                             */

/* The checksum, in the form common writers use (six octal digits, then NUL
   or space) and equal to the unsigned sum. Any other form, or a mismatch,
   returns 0: the reference re-checks (signed sums, other encodings). */
static int checksum_ok(const unsigned char *h)
{
    uint64_t sum = 0;
#ifdef __SSE2__
    /* psadbw adds 8 bytes into a 64-bit lane: 32 of them sum the block, ~4x fewer
       instructions than the 64-bit byte-pair adds below (SSE2 is x86-64's baseline). */
    __m128i zero = _mm_setzero_si128(), acc0 = zero, acc1 = zero;
    for (int i = 0; i < BLOCK; i += 32) {
        acc0 = _mm_add_epi64(acc0, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(h + i)), zero));
        acc1 = _mm_add_epi64(acc1, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(h + i + 16)), zero));
    }
    acc0 = _mm_add_epi64(acc0, acc1);
    sum = (uint64_t)_mm_cvtsi128_si64(acc0) + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc0, acc0));
#else
    for (int i = 0; i < BLOCK; i += 8) {
        uint64_t w = ld64(h + i);
        /* Add byte pairs into 16-bit lanes (at most 510 each, no overflow in 64 words). */
        sum += (w & 0x00ff00ff00ff00ffull) + ((w >> 8) & 0x00ff00ff00ff00ffull);
    }
    sum = (sum & 0xffffffffull) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
#endif
    for (int i = 0; i < 8; i++)
        sum -= h[CHKSUM_AT + i];
    sum += 8 * ' ';
    if (h[CHKSUM_AT + 6] != 0 && h[CHKSUM_AT + 6] != ' ')
        return 0;
    uint64_t stored = 0;
    for (int i = 0; i < 6; i++) {
        unsigned c = h[CHKSUM_AT + i];
        if (c < '0' || c > '7')
            return 0;
        stored = stored * 8 + (c - '0');
    }
    return stored == sum;
}

/* The 12-byte size field as octal text: cut at the first NUL, spaces
   stripped, octal digits only (empty is 0). Returns -1 for anything else
   (base-256, other whitespace): the reference decides those. */
static int64_t parse_size(const unsigned char *f)
{
    if (f[0] & 0x80)
        return -1;
    int n = 0;
    while (n < 12 && f[n])
        n++;
    int i = 0;
    while (i < n && f[i] == ' ')
        i++;
    while (n > i && f[n - 1] == ' ')
        n--;
    int64_t v = 0;
    for (; i < n; i++) {
        if (f[i] < '0' || f[i] > '7')
            return -1;
        v = v * 8 + (f[i] - '0');
    }
    return v;
}

/* Whether the pax data has a record of a key that matters: " path=", " size=" or
   " GNU.sparse." somewhere (walk.py's substring pre-test), in one pass over its spaces
   (memchr) rather than one byte-wise search per key. */
static int mentions_keys(const unsigned char *d, size_t n)
{
    const unsigned char *p = d, *end = d + n;
    while ((p = memchr(p, ' ', (size_t)(end - p))) != NULL) {
        size_t left = (size_t)(end - p) - 1;
        const unsigned char *k = p + 1;
        if (left >= 5 && (memcmp(k, "path=", 5) == 0 || memcmp(k, "size=", 5) == 0))
            return 1;
        if (left >= 11 && memcmp(k, "GNU.sparse.", 11) == 0)
            return 1;
        p = k;
    }
    return 0;
}

typedef struct {
    const unsigned char *path; /* NULL: no path record */
    size_t path_len;
    int64_t size; /* -1: no size record */
    int any;      /* a path, size or GNU.sparse record was seen */
    int sparse;
} PaxRecords;

/* The records of a pax header that matter (headers.parse_pax's rules, with
   walk.py's substring pre-test). Returns 0 where the reference would raise
   or where this code does not decide (a size that is not plain digits). */
static int parse_pax(const unsigned char *d, size_t n, PaxRecords *out)
{
    memset(out, 0, sizeof(*out));
    out->size = -1;
    if (!mentions_keys(d, n))
        return 1;
    size_t pos = 0;
    while (pos < n && d[pos] != 0) {
        size_t space = pos;
        while (space < n && d[space] != ' ')
            space++;
        if (space == n || space == pos || space - pos > 18)
            return 0;
        uint64_t length = 0;
        for (size_t i = pos; i < space; i++) {
            if (d[i] < '0' || d[i] > '9')
                return 0;
            length = length * 10 + (d[i] - '0');
        }
        if (length == 0 || length > n - pos)
            return 0;
        size_t stop = pos + (size_t)length;
        if (d[stop - 1] != '\n' || space + 1 > stop - 1)
            return 0;
        const unsigned char *rec = d + space + 1;
        size_t rec_len = stop - 1 - (space + 1);
        const unsigned char *eq = memchr(rec, '=', rec_len);
        if (eq == NULL)
            return 0;
        size_t key_len = (size_t)(eq - rec);
        const unsigned char *value = eq + 1;
        size_t value_len = rec_len - key_len - 1;
        if (key_len == 4 && memcmp(rec, "path", 4) == 0) {
            out->path = value;
            out->path_len = value_len;
            out->any = 1;
        } else if (key_len == 4 && memcmp(rec, "size", 4) == 0) {
            if (value_len == 0 || value_len > 18)
                return 0;
            int64_t v = 0;
            for (size_t i = 0; i < value_len; i++) {
                if (value[i] < '0' || value[i] > '9')
                    return 0;
                v = v * 10 + (value[i] - '0');
            }
            out->size = v;
            out->any = 1;
        } else if (key_len >= 11 && memcmp(rec, "GNU.sparse.", 11) == 0) {
            out->sparse = 1;
            out->any = 1;
        }
        pos = stop;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* the walk                                                                  */

/* The walk proper: no Python object is touched, so it runs without the GIL
   (a read-ahead thread reads the next chunk meanwhile). `out` has room for
   one member per 512 bytes of buf[start:end]. */
void scan(const unsigned char *buf, Py_ssize_t start, Py_ssize_t end, long long base,
                 long long expected, ScanState *st, Found *out)
{
    const unsigned char *global = st->global;
    Py_ssize_t global_len = st->global_len;
    Py_ssize_t committed = start;
    Py_ssize_t ahead = start; /* prefetched up to here */
    for (;;) {
        /* One group: extension headers, then the header they describe. */
        Py_ssize_t pos = committed;
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 8192 /* measured best of 4-64 KiB on a mapped 1 GiB tar */
#endif
#if PREFETCH_AHEAD > 0
        /* Keep the cache a little ahead of the walk: a mapped file's pages lie anywhere in
           memory, and the CPU's own prefetcher stops at each 4 KiB page boundary. */
        {
            Py_ssize_t to = pos + PREFETCH_AHEAD < end ? pos + PREFETCH_AHEAD : end;
            if (ahead < pos)
                ahead = pos;
            for (; ahead < to; ahead += 64)
                __builtin_prefetch(buf + ahead);
        }
#endif
        const unsigned char *long_name = NULL, *pax_path = NULL, *group_global = global;
        size_t long_len = 0, pax_path_len = 0;
        Py_ssize_t group_global_len = global_len;
        int64_t pax_size = -1;
        int have_pax = 0, sparse = 0;
        long long first_header = -1;
        for (;;) {
            if (end - pos < BLOCK)
                goto stop;
            const unsigned char *h = buf + pos;
            long long header_at = base + pos;
            if (!checksum_ok(h)) /* also the end-of-archive block: its sum is zero */
                goto stop;
            int64_t size = parse_size(h + SIZE_AT);
            if (size < 0)
                goto stop;
            unsigned char kind = h[TYPE_AT];
            if (first_header < 0)
                first_header = header_at;
            int extension = kind == 'L' || kind == 'K' || kind == 'x' || kind == 'g';
            if (kind >= '1' && kind <= '6')
                size = 0;
            else if (have_pax && pax_size >= 0 && !extension)
                size = pax_size;
            long long payload_at = header_at + BLOCK;
            if (expected >= 0 && payload_at + size > expected)
                goto stop;
            int64_t padded = (size + BLOCK - 1) & ~(int64_t)(BLOCK - 1);
            /* Every member but a V7 directory (below) has its payload in the buffer. */
            int in_buffer = padded <= (int64_t)(end - pos - BLOCK);
            const unsigned char *data = h + BLOCK;
            if ((kind == '0' || kind == 0 || kind == '7') && !sparse) {
                Found f;
                f.prefix = NULL;
                f.prefix_len = 0;
                if (have_pax && pax_path != NULL) {
                    f.name = pax_path;
                    f.name_len = pax_path_len;
                } else if (long_name != NULL) {
                    f.name = long_name;
                    f.name_len = long_len;
                } else if (group_global != NULL) {
                    f.name = group_global;
                    f.name_len = (size_t)group_global_len;
                } else {
                    f.name = h;
                    const unsigned char *nul = memchr(h, 0, 100);
                    f.name_len = nul ? (size_t)(nul - h) : 100;
                    if (h[PREFIX_AT] && memcmp(h + MAGIC_AT, "ustar\0", 6) == 0) {
                        const unsigned char *pnul = memchr(h + PREFIX_AT, 0, 155);
                        f.prefix = h + PREFIX_AT;
                        f.prefix_len = pnul ? (size_t)(pnul - (h + PREFIX_AT)) : 155;
                    }
                }
                /* The full name's last byte ('/' after a prefix when the name is empty). */
                int slash_last = f.name_len ? f.name[f.name_len - 1] == '/' : f.prefix != NULL;
                if (kind == 0 && slash_last) {
                    /* A V7 directory: not a sample member, and no payload whatever its size
                       field says (walk.py, as tarfile: the next header follows this one). */
                    st->members++;
                    st->skipped++;
                    pos += BLOCK;
                    break;
                }
                if (!in_buffer)
                    goto stop; /* the payload runs past the buffer */
                st->members++;
                f.first = first_header;
                f.payload = payload_at;
                f.size = size;
                f.crc = crc32c(0, data, (size_t)size);
                out[st->found++] = f;
                pos += BLOCK + padded;
                break;
            }
            if (!in_buffer)
                goto stop; /* the group runs past the buffer */
            if (extension) {
                if (size > MAX_EXTENSION_BYTES)
                    goto stop;
                if (kind == 'L') {
                    const unsigned char *nul = memchr(data, 0, (size_t)size);
                    long_name = data;
                    long_len = nul ? (size_t)(nul - data) : (size_t)size;
                } else if (kind == 'x' || kind == 'g') {
                    PaxRecords r;
                    if (!parse_pax(data, (size_t)size, &r))
                        goto stop;
                    if (kind == 'g') {
                        if (r.path != NULL) {
                            group_global = r.path;
                            group_global_len = (Py_ssize_t)r.path_len;
                        }
                        first_header = -1;
                    } else if (r.any) {
                        have_pax = 1;
                        if (r.path != NULL) {
                            pax_path = r.path;
                            pax_path_len = r.path_len;
                        }
                        if (r.size >= 0)
                            pax_size = r.size;
                        sparse |= r.sparse;
                    }
                }
                pos += BLOCK + padded;
                continue;
            }
            if (sparse)
                goto stop; /* a GNU sparse file: the reference skips it */
            /* A directory, link, device, FIFO or unknown type: not a sample member. */
            st->members++;
            st->skipped++;
            pos += BLOCK + padded;
            break;
        }
        committed = pos;
        global = group_global;
        global_len = group_global_len;
    }
stop:
    st->committed = committed;
    st->global = global;
    st->global_len = global_len;
}

static PyObject *py_walk(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end;
    long long base, expected;
    PyObject *global_obj;
    if (!PyArg_ParseTuple(args, "y*nnLLO", &view, &start, &end, &base, &expected, &global_obj))
        return NULL;
    PyObject *names = NULL, *firsts = NULL, *payloads = NULL, *sizes = NULL, *crcs = NULL;
    PyObject *result = NULL, *global_out = NULL;
    Found *found = NULL;
    if (start < 0 || end < start || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "walk: start and end must lie inside the buffer");
        goto done;
    }
    ScanState st = {0};
    if (global_obj != Py_None) {
        if (!PyBytes_Check(global_obj)) {
            PyErr_SetString(PyExc_TypeError, "walk: global_path must be bytes or None");
            goto done;
        }
        st.global = (const unsigned char *)PyBytes_AS_STRING(global_obj);
        st.global_len = PyBytes_GET_SIZE(global_obj);
    }
    const unsigned char *global_in = st.global;
    found = PyMem_RawMalloc(sizeof(Found) * (size_t)((end - start) / BLOCK + 1));
    if (found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The buffer cannot be resized while `view` holds it, and the walker's
       read-ahead thread writes only into buffers the walk has given back. */
    Py_BEGIN_ALLOW_THREADS
    scan(view.buf, start, end, base, expected, &st, found);
    Py_END_ALLOW_THREADS

    Py_ssize_t n = st.found;
    names = PyList_New(n);
    firsts = PyList_New(n);
    payloads = PyList_New(n);
    sizes = PyList_New(n);
    crcs = PyList_New(n);
    if (!names || !firsts || !payloads || !sizes || !crcs)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Found *f = &found[i];
        PyObject *name_obj;
        if (f->prefix != NULL) {
            name_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(f->prefix_len + 1 + f->name_len));
            if (name_obj == NULL)
                goto done;
            char *w = PyBytes_AS_STRING(name_obj);
            memcpy(w, f->prefix, f->prefix_len);
            w[f->prefix_len] = '/';
            memcpy(w + f->prefix_len + 1, f->name, f->name_len);
        } else {
            name_obj = PyBytes_FromStringAndSize((const char *)f->name, (Py_ssize_t)f->name_len);
            if (name_obj == NULL)
                goto done;
        }
        PyList_SET_ITEM(names, i, name_obj);
        PyObject *a = PyLong_FromLongLong(f->first), *b = PyLong_FromLongLong(f->payload);
        PyObject *c = PyLong_FromLongLong(f->size), *d = PyLong_FromUnsignedLong(f->crc);
        if (a) PyList_SET_ITEM(firsts, i, a);
        if (b) PyList_SET_ITEM(payloads, i, b);
        if (c) PyList_SET_ITEM(sizes, i, c);
        if (d) PyList_SET_ITEM(crcs, i, d);
        if (!a || !b || !c || !d)
            goto done; /* the lists' unset items are NULL, which their dealloc skips */
    }
    if (st.global != global_in) {
        /* A global path set in this buffer: keep a copy (later chunks overwrite it). */
        global_out = PyBytes_FromStringAndSize((const char *)st.global, st.global_len);
        if (global_out == NULL)
            goto done;
    } else {
        global_out = Py_NewRef(global_obj);
    }
    result = Py_BuildValue("(nllOOOOOO)", st.committed, st.members, st.skipped, global_out, names,
                           firsts, payloads, sizes, crcs);
done:
    PyMem_RawFree(found);
    Py_XDECREF(global_out);
    Py_XDECREF(names);
    Py_XDECREF(firsts);
    Py_XDECREF(payloads);
    Py_XDECREF(sizes);
    Py_XDECREF(crcs);
    PyBuffer_Release(&view);
    return result;
}

/* headers(buf, positions) -> the indexes into `positions` of the headers whose checksum
   checksum_ok() does not accept: the reference re-checks only those (walk.py's _verify,
   for the few headers it parsed itself in each chunk; numpy costs more on so few). */
static PyObject *py_headers(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    PyObject *positions, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &view, &PyList_Type, &positions))
        return NULL;
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < PyList_GET_SIZE(positions); i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(positions, i));
        if (at == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        if (at < 0 || at > view.len - BLOCK || !checksum_ok((const unsigned char *)view.buf + at)) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(out, index) < 0)
                Py_CLEAR(out);
            Py_XDECREF(index);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14+; older headers do not name it */
#endif

static PyObject *mmap_type; /* mmap.mmap: the only buffers advise() takes */

/* advise(mapping, start, length, advice) -> errno (0: done): madvise() over
   mapping[start:start + length] (start rounded down to a page) without the GIL,
   for mapped.py's thread that maps the next window (MADV_POPULATE_READ) and drops
   the page tables of walked ones (MADV_DONTNEED) while the walk reads this one:
   Python's mmap.madvise holds the GIL for the whole call. Only for what it is for:
   a read-only mmap.mmap (MADV_DONTNEED on a writable or private mapping, or on
   heap memory, would throw data away), a range inside it, and those two advices;
   anything else is a ValueError or TypeError. EINVAL: the kernel does not know the
   advice; EFAULT: the file was cut; ENOSYS: not Linux. Advice only: the caller
   never raises on these. */
static PyObject *py_advise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *mapping;
    Py_buffer view;
    Py_ssize_t start, length;
    int advice;
    if (!PyArg_ParseTuple(args, "Onni", &mapping, &start, &length, &advice))
        return NULL;
    if (mmap_type == NULL || !PyObject_TypeCheck(mapping, (PyTypeObject *)mmap_type)) {
        PyErr_SetString(PyExc_TypeError, "advise: the mapping must be an mmap.mmap");
        return NULL;
    }
#ifdef __linux__
    if (advice != MADV_POPULATE_READ && advice != MADV_DONTNEED) {
        PyErr_Format(PyExc_ValueError,
                     "advise: advice %d is not MADV_POPULATE_READ (%d) or MADV_DONTNEED (%d)",
                     advice, MADV_POPULATE_READ, MADV_DONTNEED);
        return NULL;
    }
#endif
    if (PyObject_GetBuffer(mapping, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int err = 0;
    if (!view.readonly) {
        PyErr_SetString(PyExc_ValueError,
                        "advise: the mapping must be read-only (access=mmap.ACCESS_READ)");
        err = -1;
    } else if (start < 0 || length < 0 || start > view.len || length > view.len - start) {
        PyErr_Format(PyExc_ValueError,
                     "advise: [%zd, %zd + %zd) is not inside the mapping of %zd bytes", start,
                     start, length, view.len);
        err = -1;
    }
    if (err < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
#ifdef __linux__
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (length > 0 && (uintptr_t)view.buf % page == 0) {
        /* A mapping starts on a page (mmap.mmap's offsets are multiples of the allocation
           granularity): rounding the start down to a page stays inside it. */
        uintptr_t from = ((uintptr_t)view.buf + (uintptr_t)start) & ~(page - 1);
        size_t span = (size_t)((uintptr_t)view.buf + (uintptr_t)(start + length) - from);
        Py_BEGIN_ALLOW_THREADS
        if (madvise((void *)from, span, advice) != 0)
            err = errno;
        Py_END_ALLOW_THREADS
    } else if (length > 0) {
        err = EINVAL;
    }
#else
    (void)advice;
    err = ENOSYS;
#endif
    PyBuffer_Release(&view);
    return PyLong_FromLong(err);
}

/* ------------------------------------------------------------------------ */
/* the module                                                                */

static PyObject *crc_args(PyObject *args, int table)
{
    Py_buffer data;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &data, &value))
        return NULL;
    uint32_t v = (uint32_t)value;
    uint32_t c = table ? crc_sw(v, data.buf, (size_t)data.len) : crc32c(v, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    (void)self;
    return crc_args(args, 0);
}
static PyObject *py_crc32c_table(PyObject *self, PyObject *args)
{
    (void)self;
    return crc_args(args, 1);
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS,
     "walk(buf, start, end, base, expected, global_path) -> (stop, members, skipped, global_path, "
     "names, first_headers, payload_offsets, sizes, crc32cs): the complete member groups of "
     "buf[start:end], up to the first one the reference walker must read."},
    {"walk_block", py_walk_block, METH_VARARGS,
     "walk_block(buf, start, end, base, expected, global_path) -> (stop, members, skipped, "
     "global_path, Members or None): walk() with the members kept in one C block."},
    {"headers", py_headers, METH_VARARGS,
     "headers(buf, positions) -> indexes of the headers whose checksum the fast check rejects."},
    {"advise", py_advise, METH_VARARGS,
     "advise(mapping, start, length, advice) -> errno: madvise() over the range, without the GIL."},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0): CRC32C of data, continuing from value."},
    {"crc32c_table", py_crc32c_table, METH_VARARGS, "CRC32C by the table fallback (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ctar", "The compiled tar walker (see tarwalker.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__ctar(void)
{
    crc_init();
    PyObject *mmap_module = PyImport_ImportModule("mmap");
    if (mmap_module == NULL)
        return NULL;
    mmap_type = PyObject_GetAttrString(mmap_module, "mmap");
    Py_DECREF(mmap_module);
    if (mmap_type == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "BLOCK", BLOCK) < 0 ||
        PyModule_AddIntConstant(m, "MAX_EXTENSION_BYTES", MAX_EXTENSION_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "have_sse42", have_sse42) < 0 ||
#ifdef __linux__
        PyModule_AddIntConstant(m, "MADV_POPULATE_READ", MADV_POPULATE_READ) < 0 ||
        PyModule_AddIntConstant(m, "MADV_DONTNEED", MADV_DONTNEED) < 0 ||
#endif
        add_sample_types(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
