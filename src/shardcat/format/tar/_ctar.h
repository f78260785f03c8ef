/* What the two units of the compiled tar walker (shardcat.format.tar._ctar)
 * share: _ctar.c (the member walk, scan(), and the module) and _samples.c
 * (the walk's members grouped into samples and the footer's rows). */
#ifndef SHARDCAT_CTAR_H
#define SHARDCAT_CTAR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#define SC_CRC_SHARED 1 /* one copy of the CRC tables, in _ctar.c */
#include "../_crc32c.h"
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Layout constants: tar/spec.py and walk.py declare them; tests/format/test_c_layout.py checks these copies. */
#define BLOCK 512
#define CHKSUM_AT 148
#define SIZE_AT 124
#define TYPE_AT 156
#define MAGIC_AT 257
#define PREFIX_AT 345
#define MAX_EXTENSION_BYTES (16 << 20)

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* One regular member found by scan(): its name is prefix + '/' + name when
   prefix is not NULL; both point into the buffer or the global path. */
typedef struct {
    const unsigned char *prefix;
    size_t prefix_len;
    const unsigned char *name;
    size_t name_len;
    long long first;
    long long payload;
    int64_t size;
    uint32_t crc;
} Found;

typedef struct {
    Py_ssize_t committed; /* after the last group accepted */
    long members, skipped;
    const unsigned char *global; /* the pax global path after the last group */
    Py_ssize_t global_len;
    Py_ssize_t found;
} ScanState;

/* The walk proper (_ctar.c): no Python object is touched, so it runs without the GIL. */
void scan(const unsigned char *buf, Py_ssize_t start, Py_ssize_t end, long long base, long long expected,
          ScanState *st, Found *out);

/* _samples.c */
PyObject *py_walk_block(PyObject *self, PyObject *args);
int add_sample_types(PyObject *m);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SHARDCAT_CTAR_H */
