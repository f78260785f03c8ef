/* Write-behind for local shard files: one buffer written by a POSIX thread
 * that never takes the GIL.
 *
 * A Python thread that writes a block releases the GIL for the write() call
 * but must take it back afterwards, and gets it only when the encoding thread
 * hands it over (every 5 ms at most): on a busy machine each hand-over waits
 * for the scheduler, and a Python write-behind thread measured slower than no
 * thread at all. Here the thread is C all through: start() keeps the buffer
 * (a bytes object's, through the buffer protocol) and starts the thread;
 * finish() releases the GIL while it joins it and raises the write's error.
 *
 *   handle = start(fd, data, writeback_start, writeback_length)
 *   finish(handle)   # None, or OSError(errno) of the failed write
 *
 * finish() is idempotent and may be called from several threads at once:
 * the first joins the thread, the others wait for that join (joining one
 * thread twice is undefined: the second never returned), and
 * every call reports the write's outcome.
 *
 * writeback_length > 0 asks the thread, after the write, to start the disk
 * write of that range (Linux sync_file_range(SYNC_FILE_RANGE_WRITE): advice,
 * its failure is ignored; the final fsync makes the data durable).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    pthread_t thread;
    pthread_mutex_t joining; /* held by the one caller that joins the thread */
    int fd;
    Py_buffer buf; /* holds a reference to the exporter until finish() */
    int err;       /* errno of the failed write(), 0 if it succeeded */
    int running;   /* the thread was started and not yet joined (changed under `joining`) */
    pid_t pid;     /* the process that started it: a forked child has no such thread */
    long long wb_start, wb_length;
} job_t;

static const char CAPSULE[] = "shardcat.storage._cwrite.job";

static void *run(void *arg)
{
    job_t *j = (job_t *)arg;
    const char *p = (const char *)j->buf.buf;
    Py_ssize_t left = j->buf.len;
    while (left > 0) {
        ssize_t n = write(j->fd, p, (size_t)left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            j->err = errno;
            return NULL;
        }
        if (n == 0) { /* no progress on a regular file: report it, never spin */
            j->err = EIO;
            return NULL;
        }
        p += n;
        left -= n;
    }
#ifdef __linux__
    if (j->wb_length > 0)
        (void)sync_file_range(j->fd, (off64_t)j->wb_start, (off64_t)j->wb_length, SYNC_FILE_RANGE_WRITE);
#endif
    return NULL;
}

/* Join the thread once, whoever calls first (without the GIL: the thread never takes it). */
static void join(job_t *j)
{
    if (j->pid != getpid()) {
        /* A fork's copy of the handle: the thread is the parent's, and so may be the
           mutex (locked at the fork by a parent thread joining): touch neither. */
        j->running = 0;
        return;
    }
    pthread_mutex_lock(&j->joining);
    if (j->running) {
        pthread_join(j->thread, NULL);
        j->running = 0;
    }
    pthread_mutex_unlock(&j->joining);
}

static void destroy(PyObject *capsule)
{
    job_t *j = (job_t *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (j == NULL)
        return;
    /* The last reference: no finish() runs. Never finished (an error unwound the
       caller): wait without the GIL. */
    Py_BEGIN_ALLOW_THREADS join(j);
    Py_END_ALLOW_THREADS
    if (j->buf.obj != NULL)
        PyBuffer_Release(&j->buf);
    if (j->pid == getpid())
        pthread_mutex_destroy(&j->joining);
    free(j);
}

static PyObject *py_start(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *data;
    long long wb_start, wb_length;
    if (!PyArg_ParseTuple(args, "iOLL", &fd, &data, &wb_start, &wb_length))
        return NULL;
    job_t *j = (job_t *)calloc(1, sizeof(job_t));
    if (j == NULL)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(data, &j->buf, PyBUF_SIMPLE) < 0) {
        free(j);
        return NULL;
    }
    if (pthread_mutex_init(&j->joining, NULL) != 0) {
        PyBuffer_Release(&j->buf);
        free(j);
        return PyErr_NoMemory();
    }
    j->fd = fd;
    j->pid = getpid();
    j->wb_start = wb_start;
    j->wb_length = wb_length;
    PyObject *capsule = PyCapsule_New(j, CAPSULE, destroy);
    if (capsule == NULL) {
        PyBuffer_Release(&j->buf);
        pthread_mutex_destroy(&j->joining);
        free(j);
        return NULL;
    }
    int rc = pthread_create(&j->thread, NULL, run, j);
    if (rc != 0) {
        Py_DECREF(capsule); /* frees j and the buffer */
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    j->running = 1;
    return capsule;
}

static PyObject *py_finish(PyObject *self, PyObject *capsule)
{
    job_t *j = (job_t *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (j == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS join(j);
    Py_END_ALLOW_THREADS
    /* The GIL held again: one caller releases the buffer, the others see it released. */
    if (j->buf.obj != NULL)
        PyBuffer_Release(&j->buf);
    if (j->err != 0) { /* to every caller: each waited for the write */
        errno = j->err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"start", py_start, METH_VARARGS,
     "start(fd, data, writeback_start, writeback_length): write data to fd on a thread; returns a handle."},
    {"finish", py_finish, METH_O,
     "finish(handle): wait for the write; raise OSError if it failed (idempotent, thread-safe)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cwrite",
                                    "Write-behind of local shard blocks on a thread without the GIL.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cwrite(void) { return PyModule_Create(&module); }
