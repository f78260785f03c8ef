/* CRC32C: the module's one copy of the tables (SC_CRC_DEFINE; crc_init at
 * module init picks SSE4.2 or slicing-by-8), and the crc32c() and
 * crc32c_table() entry points. */
#define SC_CRC_DEFINE 1
#include "ccodec.h"

PyObject *py_crc32c(PyObject *self, PyObject *args)
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

PyObject *py_crc32c_table(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &b, &value))
        return NULL;
    uint32_t crc = crc_sw((uint32_t)value, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}


