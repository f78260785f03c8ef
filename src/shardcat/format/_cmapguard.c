/*
 * Guarded read-only mappings: a file cut while it is mapped is reported, not a SIGBUS.
 * Python side and the rules for callers: shardcat/format/mapguard.py.
 *
 * A page of a file mapping that lies past the file's end (it was cut after
 * it was mapped) or that cannot be read (an I/O error) raises SIGBUS at the
 * instruction that touches it, whoever that is: the compiled walk, a
 * memcpy, numpy, Python's own code. guard(mapping) registers the mapping's
 * pages; this module's SIGBUS handler, for a fault inside a registered
 * mapping, maps anonymous zero pages (read-only) over the faulting page and
 * every page after it to the mapping's end, records the first such page, and
 * returns: the faulting instruction runs again and reads zeros. Nothing read
 * from a mapping may then be trusted until its guard was asked (fault, and
 * the file's size): mapguard.py does that before any result leaves a read.
 * Any other SIGBUS (another address, or one sent by kill) goes to the
 * handler that was there before (Python's faulthandler, ASan's, or the
 * default action, which ends the process as it would have).
 *
 * Signal safety: the handler reads the registry with atomic loads only, and
 * calls the mmap system call itself (not the C library's wrapper, which a
 * sanitizer may intercept). Registration runs with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#if defined(__linux__)
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_GUARD 1
#else
#define HAVE_GUARD 0
#endif

/* Mappings guarded at once in a process: guard() refuses beyond (the caller then reads). */
#define SLOTS 256

#if HAVE_GUARD
typedef struct {
    uintptr_t lo, hi; /* the mapping's pages, [lo, hi); lo == 0: a free slot */
    uintptr_t cut;    /* the first page replaced by zeros (UINTPTR_MAX: none) */
} Range;

static Range ranges[SLOTS];
static uintptr_t page_size;
static struct sigaction previous; /* the SIGBUS action before this module's */

/* The action that was there before: a handler is called as the kernel would have; the
   default action (or SIG_IGN, which the kernel overrides for a fault) ends the process. */
static volatile sig_atomic_t chaining; /* a handler that chains back here ends in the default */

static void chain(int sig, siginfo_t *info, void *context)
{
    if (!chaining) {
        chaining = 1;
        if (previous.sa_flags & SA_SIGINFO) {
            if (previous.sa_sigaction != NULL) {
                previous.sa_sigaction(sig, info, context);
                chaining = 0;
                return;
            }
        } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
            previous.sa_handler(sig);
            chaining = 0;
            return;
        }
        chaining = 0;
    }
    int fault = info != NULL && info->si_code > 0;
    if (!fault && previous.sa_handler == SIG_IGN)
        return; /* sent by a process and ignored before: still ignored */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (!fault)
        raise(sig); /* delivered once this handler returns (SIGBUS is blocked in it) */
    /* A fault: the instruction faults again on return, now with the default action. */
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    int saved = errno;
    if (info != NULL && info->si_code > 0) { /* raised by the kernel for this thread's access */
        uintptr_t addr = (uintptr_t)info->si_addr;
        for (int i = 0; i < SLOTS; i++) {
            uintptr_t lo = __atomic_load_n(&ranges[i].lo, __ATOMIC_ACQUIRE);
            if (lo == 0 || addr < lo)
                continue;
            uintptr_t hi = __atomic_load_n(&ranges[i].hi, __ATOMIC_ACQUIRE);
            if (addr >= hi)
                continue;
            uintptr_t from = addr & ~(page_size - 1);
            long got = syscall(SYS_mmap, (void *)from, (size_t)(hi - from), PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (got == -1)
                break; /* cannot patch it: as if unguarded */
            uintptr_t seen = __atomic_load_n(&ranges[i].cut, __ATOMIC_RELAXED);
            while (from < seen && !__atomic_compare_exchange_n(&ranges[i].cut, &seen, from, 0,
                                                                __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                ;
            errno = saved;
            return;
        }
    }
    errno = saved;
    chain(sig, info, context);
}

/* This module's handler in place (again, if another was installed over it since). */
static int ensure_handler(void)
{
    struct sigaction current;
    if (sigaction(SIGBUS, NULL, &current) != 0)
        return -1;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus)
        return 0;
    struct sigaction mine;
    memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = on_sigbus;
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&mine.sa_mask);
    previous = current; /* before ours is in place: the handler reads it */
    return sigaction(SIGBUS, &mine, NULL);
}
#endif

/* ------------------------------------------------------------------------ */
/* Guard: one registered mapping                                             */

static PyObject *mmap_type; /* mmap.mmap */

typedef struct {
    PyObject_HEAD
    Py_buffer view; /* held: the mapping cannot be closed (unmapped) while guarded */
    int slot;       /* -1: closed */
} Guard;

static void guard_release(Guard *g)
{
    if (g->slot < 0)
        return;
#if HAVE_GUARD
    /* Free the slot before the buffer: the pages may be unmapped and reused right after. */
    __atomic_store_n(&ranges[g->slot].lo, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&ranges[g->slot].hi, 0, __ATOMIC_RELEASE);
#endif
    g->slot = -1;
    PyBuffer_Release(&g->view);
}

static void guard_dealloc(Guard *g)
{
    guard_release(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *guard_close(Guard *g, PyObject *unused)
{
    (void)unused;
    guard_release(g);
    Py_RETURN_NONE;
}

/* cut -> the offset of the first page found cut (read as zeros since), or -1. */
static PyObject *guard_cut(Guard *g, void *closure)
{
    (void)closure;
#if HAVE_GUARD
    if (g->slot >= 0) {
        uintptr_t cut = __atomic_load_n(&ranges[g->slot].cut, __ATOMIC_ACQUIRE);
        if (cut != UINTPTR_MAX)
            return PyLong_FromSize_t((size_t)(cut - (uintptr_t)g->view.buf));
    }
#endif
    return PyLong_FromLong(-1);
}

static PyMethodDef guard_methods[] = {
    {"close", (PyCFunction)guard_close, METH_NOARGS,
     "close(): stop guarding (before the mapping is closed; safe to call twice)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef guard_getset[] = {
    {"cut", (getter)guard_cut, NULL,
     "Offset of the first page found cut while guarded (zeros from there on), or -1.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GuardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardcat.format._cmapguard.Guard",
    .tp_basicsize = sizeof(Guard),
    .tp_dealloc = (destructor)guard_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A guarded read-only mapping (made by guard(); see mapguard.py).",
    .tp_methods = guard_methods,
    .tp_getset = guard_getset,
};

/* guard(mapping) -> Guard: SIGBUS inside a read-only mmap.mmap becomes zeros and a record. */
static PyObject *py_guard(PyObject *self, PyObject *mapping)
{
    (void)self;
    if (!PyObject_TypeCheck(mapping, (PyTypeObject *)mmap_type)) {
        PyErr_SetString(PyExc_TypeError, "guard: give an mmap.mmap");
        return NULL;
    }
#if HAVE_GUARD
    Guard *g = PyObject_New(Guard, &GuardType);
    if (g == NULL)
        return NULL;
    g->slot = -1;
    if (PyObject_GetBuffer(mapping, &g->view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(g);
        return NULL;
    }
    uintptr_t lo = (uintptr_t)g->view.buf;
    /* Read-only: zeros put in place of a writable page would lose what is written to it. */
    if (!g->view.readonly || g->view.len <= 0 || lo % page_size != 0) {
        PyBuffer_Release(&g->view);
        Py_DECREF(g);
        PyErr_SetString(PyExc_ValueError,
                        "guard: give a non-empty mapping made with access=mmap.ACCESS_READ");
        return NULL;
    }
    if (ensure_handler() < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        PyBuffer_Release(&g->view);
        Py_DECREF(g);
        return NULL;
    }
    for (int i = 0; i < SLOTS; i++) {
        if (__atomic_load_n(&ranges[i].lo, __ATOMIC_ACQUIRE) != 0)
            continue;
        uintptr_t hi = (lo + (uintptr_t)g->view.len + page_size - 1) & ~(page_size - 1);
        __atomic_store_n(&ranges[i].cut, UINTPTR_MAX, __ATOMIC_RELAXED);
        __atomic_store_n(&ranges[i].hi, hi, __ATOMIC_RELEASE);
        __atomic_store_n(&ranges[i].lo, lo, __ATOMIC_RELEASE);
        g->slot = i;
        return (PyObject *)g;
    }
    PyBuffer_Release(&g->view);
    Py_DECREF(g);
    PyErr_SetString(PyExc_OverflowError, "guard: too many mappings guarded at once");
    return NULL;
#else
    PyErr_SetString(PyExc_NotImplementedError, "guard: only on Linux");
    return NULL;
#endif
}

static PyMethodDef methods[] = {
    {"guard", py_guard, METH_O,
     "guard(mapping) -> Guard: a fault in the read-only mapping (its file cut) reads zeros and "
     "is recorded (Guard.cut) instead of raising SIGBUS."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cmapguard", "Guarded read-only mappings (see mapguard.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__cmapguard(void)
{
#if HAVE_GUARD
    page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
#endif
    PyObject *mmap_module = PyImport_ImportModule("mmap");
    if (mmap_module == NULL)
        return NULL;
    mmap_type = PyObject_GetAttrString(mmap_module, "mmap");
    Py_DECREF(mmap_module);
    if (mmap_type == NULL)
        return NULL;
    if (PyType_Ready(&GuardType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "available", HAVE_GUARD) < 0 ||
        PyModule_AddIntConstant(m, "SLOTS", SLOTS) < 0 ||
        PyModule_AddObjectRef(m, "Guard", (PyObject *)&GuardType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
