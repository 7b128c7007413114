/* The record codec's two hot loops, in C: encoding the records of a batch, and decoding a
 * batch's records straight into consumer records.
 *
 * Both are accelerators for pure-Python code that stays the reference (proto/lograft/protocol/batch_builder.py,
 * proto/lograft/protocol/record_codec.py): each either returns exactly what the Python code returns for the
 * same input, or returns None and lets the Python code decide. So the decoder never raises
 * for malformed bytes (the Python decoder raises the typed CorruptMessageError), and the
 * encoder handles bytes and None only (the Python encoder reports other types).
 *
 * The input is untrusted: every read is checked against the end of the record and of the data
 * before it happens, and arithmetic that could overflow 64 bits declines instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_VARINT_BYTES 10

/* ------------------------------------------------------------------------------------------ */
/* Varints */

/* The raw (still zigzagged) varint at *pos, at most ten bytes, not past limit. */
static int
read_varint(const unsigned char *data, Py_ssize_t limit, Py_ssize_t *pos, uint64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < MAX_VARINT_BYTES; i++) {
        if (p >= limit) {
            return -1;
        }
        unsigned char byte = data[p++];
        if (shift == 63 && (byte & 0x7E)) {
            return -1; /* more than 64 bits: the Python decoder decides */
        }
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = p;
            *out = raw;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static int64_t
unzigzag(uint64_t raw)
{
    return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
}

static Py_ssize_t
varint_size(uint64_t raw)
{
    Py_ssize_t size = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        size++;
    }
    return size;
}

static uint64_t
zigzag(int64_t value)
{
    return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
}

static unsigned char *
write_varint(unsigned char *out, uint64_t raw)
{
    while (raw >= 0x80) {
        *out++ = (unsigned char)(raw | 0x80);
        raw >>= 7;
    }
    *out++ = (unsigned char)raw;
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding */

/* A nullable length-prefixed field (key, value, header value) in [*pos, end): 0 and *field
 * set (a new reference, Py_None for a null one), or -1 to decline. */
static int
read_nullable_bytes(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, PyObject **field)
{
    uint64_t raw;
    Py_ssize_t start = *pos;
    if (read_varint(data, end, pos, &raw) < 0) {
        return -1;
    }
    if (raw == 1) {
        if (*pos - start != 1) {
            return -1; /* null written long (0x81 0x00): the Python decoder rejects a key so */
        }
        *field = Py_NewRef(Py_None);
        return 0;
    }
    if (raw & 1) {
        return -1;
    }
    uint64_t size = raw >> 1;
    if (size > (uint64_t)(end - *pos)) {
        return -1;
    }
    *field = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)size);
    if (*field == NULL) {
        return -2; /* a real error (memory): raised */
    }
    *pos += (Py_ssize_t)size;
    return 0;
}

/* The headers tuple of a record, in [*pos, end): 0 and *headers set, -1 to decline, -2 on
 * a raised error. */
static int
read_headers(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, PyObject *empty,
             PyObject **headers)
{
    uint64_t raw;
    if (read_varint(data, end, pos, &raw) < 0 || (raw & 1)) {
        return -1;
    }
    uint64_t count = raw >> 1;
    if (count == 0) {
        *headers = Py_NewRef(empty);
        return 0;
    }
    /* Each header takes at least two bytes: a count beyond that is malformed. */
    if (count > (uint64_t)(end - *pos) / 2) {
        return -1;
    }
    PyObject *tuple = PyTuple_New((Py_ssize_t)count);
    if (tuple == NULL) {
        return -2;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (read_varint(data, end, pos, &raw) < 0 || (raw & 1) ||
            (raw >> 1) > (uint64_t)(end - *pos)) {
            Py_DECREF(tuple);
            return -1;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)data + *pos, (Py_ssize_t)(raw >> 1),
                                             "strict");
        if (key == NULL) {
            Py_DECREF(tuple);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                return -1;
            }
            return -2;
        }
        *pos += (Py_ssize_t)(raw >> 1);
        PyObject *value;
        int status = read_nullable_bytes(data, end, pos, &value);
        if (status < 0) {
            Py_DECREF(key);
            Py_DECREF(tuple);
            return status;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) {
            Py_DECREF(tuple);
            return -2;
        }
        PyObject_GC_UnTrack(pair);
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, pair);
    }
    PyObject_GC_UnTrack(tuple);
    *headers = tuple;
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(record_type, topic, partition, data, count, base_offset, base_timestamp,\n"
"               fixed_timestamp, last_offset_delta, start_offset) -> list | None\n"
"\n"
"The records of a batch's (decompressed) records data as ``record_type`` tuples\n"
"``(topic, partition, offset, timestamp, key, value, headers)``, those from\n"
"``start_offset`` on; ``fixed_timestamp`` (LogAppendTime) replaces each record's own when\n"
"not None. None for anything the Python decoder would reject, or that this one does not\n"
"handle: the caller then decodes with the Python decoder, which raises the right error.");

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 10 arguments");
        return NULL;
    }
    PyObject *record_type = args[0];
    PyObject *topic = args[1];
    PyObject *partition = args[2];
    PyObject *data_object = args[3];
    if (!PyType_Check(record_type) ||
        !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type) ||
        ((PyTypeObject *)record_type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple type without a __dict__");
        return NULL;
    }
    if (!PyBytes_CheckExact(data_object)) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes");
        return NULL;
    }
    long long numbers[5]; /* count, base offset, base timestamp, last offset delta, start */
    const int positions[5] = {4, 5, 6, 8, 9};
    for (int i = 0; i < 5; i++) {
        if (!PyLong_CheckExact(args[positions[i]])) {
            PyErr_SetString(PyExc_TypeError, "counts, offsets and timestamps must be int");
            return NULL;
        }
        int overflow;
        numbers[i] = PyLong_AsLongLongAndOverflow(args[positions[i]], &overflow);
        if (overflow) {
            Py_RETURN_NONE; /* beyond 64 bits: the Python decoder decides */
        }
    }
    long long base_offset = numbers[1], base_timestamp = numbers[2];
    long long last_offset_delta = numbers[3], start_offset = numbers[4];
    if (numbers[0] > PY_SSIZE_T_MAX) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = (Py_ssize_t)numbers[0];
    PyObject *fixed_timestamp = args[7];
    if (fixed_timestamp != Py_None && !PyLong_CheckExact(fixed_timestamp)) {
        PyErr_SetString(PyExc_TypeError, "fixed_timestamp must be an int or None");
        return NULL;
    }
    if (count <= 0 || last_offset_delta < 0) {
        Py_RETURN_NONE;
    }
    PyTypeObject *type = (PyTypeObject *)record_type;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(data_object);
    Py_ssize_t size = PyBytes_GET_SIZE(data_object);
    uint64_t max_offset_raw = (uint64_t)last_offset_delta << 1;

    PyObject *empty = PyTuple_New(0);
    PyObject *records = PyList_New(0);
    /* Records of one timestamp (the commonest case) share one int object. */
    PyObject *shared_timestamp = NULL;
    long long shared_timestamp_value = 0;
    if (empty == NULL || records == NULL) {
        goto error;
    }
    if (fixed_timestamp != Py_None) {
        shared_timestamp = Py_NewRef(fixed_timestamp);
    }
    Py_ssize_t pos = 0;
    long long previous_offset = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        uint64_t raw;
        if (read_varint(data, size, &pos, &raw) < 0 || (raw & 1) ||
            (raw >> 1) > (uint64_t)(size - pos)) {
            goto decline;
        }
        Py_ssize_t end = pos + (Py_ssize_t)(raw >> 1);
        pos += 1; /* attributes, unused */
        if (pos > end || read_varint(data, end, &pos, &raw) < 0) {
            goto decline;
        }
        long long timestamp;
        if (__builtin_add_overflow(base_timestamp, (long long)unzigzag(raw), &timestamp)) {
            goto decline;
        }
        if (read_varint(data, end, &pos, &raw) < 0 || (raw & 1) || raw > max_offset_raw) {
            goto decline;
        }
        long long offset;
        if (__builtin_add_overflow(base_offset, (long long)(raw >> 1), &offset) ||
            (index > 0 && offset <= previous_offset)) {
            /* Offsets out of order: the Python decoder's rows differ in what a start offset
             * filters out, so it decides. */
            goto decline;
        }
        previous_offset = offset;
        PyObject *key = NULL, *value = NULL, *headers = NULL;
        int status = read_nullable_bytes(data, end, &pos, &key);
        if (status == 0) {
            status = read_nullable_bytes(data, end, &pos, &value);
        }
        if (status == 0) {
            status = read_headers(data, end, &pos, empty, &headers);
        }
        if (status == 0 && pos != end) {
            status = -1;
        }
        if (status < 0 || offset < start_offset) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(headers);
            if (status == -1) {
                goto decline;
            }
            if (status == -2) {
                goto error;
            }
            continue;
        }
        PyObject *timestamp_object;
        if (shared_timestamp != NULL &&
            (fixed_timestamp != Py_None || shared_timestamp_value == timestamp)) {
            timestamp_object = Py_NewRef(shared_timestamp);
        }
        else {
            timestamp_object = PyLong_FromLongLong(timestamp);
            if (timestamp_object != NULL && shared_timestamp == NULL) {
                shared_timestamp = Py_NewRef(timestamp_object);
                shared_timestamp_value = timestamp;
            }
        }
        PyObject *offset_object = PyLong_FromLongLong(offset);
        PyObject *record = type->tp_alloc(type, 7);
        if (timestamp_object == NULL || offset_object == NULL || record == NULL) {
            Py_XDECREF(timestamp_object);
            Py_XDECREF(offset_object);
            Py_XDECREF(record);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto error;
        }
        PyTuple_SET_ITEM(record, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(record, 1, Py_NewRef(partition));
        PyTuple_SET_ITEM(record, 2, offset_object);
        PyTuple_SET_ITEM(record, 3, timestamp_object);
        PyTuple_SET_ITEM(record, 4, key);
        PyTuple_SET_ITEM(record, 5, value);
        PyTuple_SET_ITEM(record, 6, headers);
        /* A record holds no container that could lead back to it (its headers tuple holds
         * str and bytes pairs only), so the cycle collector need never look at it: without
         * this, decoding a 1 MiB batch spends two thirds of its time in collections that
         * walk the records decoded so far. */
        PyObject_GC_UnTrack(record);
        int appended = PyList_Append(records, record);
        Py_DECREF(record);
        if (appended < 0) {
            goto error;
        }
    }
    if (pos != size) {
        goto decline;
    }
    Py_DECREF(empty);
    Py_XDECREF(shared_timestamp);
    return records;

decline:
    Py_XDECREF(empty);
    Py_XDECREF(records);
    Py_XDECREF(shared_timestamp);
    Py_RETURN_NONE;

error:
    Py_XDECREF(empty);
    Py_XDECREF(records);
    Py_XDECREF(shared_timestamp);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding */

/* A field of bytes or None: 0 with its pointer and size (-1 for None), or -1 for any other
 * type (the caller declines). */
static int
nullable_bytes(PyObject *object, const char **bytes, Py_ssize_t *size)
{
    if (object == Py_None) {
        *bytes = NULL;
        *size = -1;
        return 0;
    }
    if (!PyBytes_CheckExact(object)) {
        return -1; /* a subclass may answer len() otherwise: the Python encoder decides */
    }
    *bytes = PyBytes_AS_STRING(object);
    *size = PyBytes_GET_SIZE(object);
    return 0;
}

static Py_ssize_t
nullable_size(Py_ssize_t size)
{
    return size < 0 ? 1 : varint_size(zigzag(size)) + size;
}

static unsigned char *
write_nullable(unsigned char *out, const char *bytes, Py_ssize_t size)
{
    if (size < 0) {
        *out++ = 1;
        return out;
    }
    out = write_varint(out, zigzag(size));
    memcpy(out, bytes, (size_t)size);
    return out + size;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(values, keys, timestamps, base_timestamp, headers) -> bytes | None\n"
"\n"
"The records of a batch, uncompressed, as they follow its header: the i-th record holds\n"
"values[i], keys[i] (keys None: no keys), timestamps[i] - base_timestamp (timestamps None:\n"
"delta 0), offset delta i and headers[i], its headers already encoded (headers None: no\n"
"headers). values and keys hold bytes or None, headers bytes; lists or tuples. None when\n"
"an item is of another type or a timestamp does not fit 64 bits: the Python encoder then\n"
"encodes (or reports) them.");

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_records takes 5 arguments");
        return NULL;
    }
    PyObject *values = args[0], *keys = args[1], *timestamps = args[2], *headers = args[4];
    long long base_timestamp = PyLong_AsLongLong(args[3]);
    if (base_timestamp == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    if (!(PyList_CheckExact(values) || PyTuple_CheckExact(values)) ||
        (keys != Py_None && !(PyList_CheckExact(keys) || PyTuple_CheckExact(keys))) ||
        (timestamps != Py_None && !(PyList_CheckExact(timestamps) || PyTuple_CheckExact(timestamps))) ||
        (headers != Py_None && !(PyList_CheckExact(headers) || PyTuple_CheckExact(headers)))) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(values);
    if ((keys != Py_None && PySequence_Fast_GET_SIZE(keys) != count) ||
        (timestamps != Py_None && PySequence_Fast_GET_SIZE(timestamps) != count) ||
        (headers != Py_None && PySequence_Fast_GET_SIZE(headers) != count)) {
        Py_RETURN_NONE;
    }
    PyObject **value_items = PySequence_Fast_ITEMS(values);
    PyObject **key_items = keys == Py_None ? NULL : PySequence_Fast_ITEMS(keys);
    PyObject **timestamp_items = timestamps == Py_None ? NULL : PySequence_Fast_ITEMS(timestamps);
    PyObject **header_items = headers == Py_None ? NULL : PySequence_Fast_ITEMS(headers);

    /* First pass: check every item and size the whole. Only exact bytes and exact ints are
     * accepted, whose conversions run no Python code, so the sequences cannot change
     * between the passes (the second also checks each record against the room left). */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *bytes;
        Py_ssize_t value_size, key_size = -1, header_size = 1;
        if (nullable_bytes(value_items[i], &bytes, &value_size) < 0 ||
            (key_items != NULL && nullable_bytes(key_items[i], &bytes, &key_size) < 0)) {
            Py_RETURN_NONE;
        }
        if (header_items != NULL) {
            if (!PyBytes_CheckExact(header_items[i])) {
                Py_RETURN_NONE;
            }
            header_size = PyBytes_GET_SIZE(header_items[i]);
        }
        uint64_t delta_raw = 0;
        if (timestamp_items != NULL) {
            /* Exact ints only: converting anything else may run Python code (__index__),
             * which could change the lists between the two passes. */
            if (!PyLong_CheckExact(timestamp_items[i])) {
                Py_RETURN_NONE;
            }
            int overflow;
            long long timestamp = PyLong_AsLongLongAndOverflow(timestamp_items[i], &overflow);
            long long delta;
            if (overflow || __builtin_sub_overflow(timestamp, base_timestamp, &delta)) {
                Py_RETURN_NONE;
            }
            delta_raw = zigzag(delta);
        }
        Py_ssize_t body = 1 + varint_size(delta_raw) + varint_size(zigzag(i)) +
                          nullable_size(key_size) + nullable_size(value_size) + header_size;
        total += varint_size(zigzag(body)) + body;
        if (total < 0 || total > PY_SSIZE_T_MAX / 2) {
            PyErr_SetString(PyExc_OverflowError, "records too large");
            return NULL;
        }
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    unsigned char *end = out + total;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *value_bytes, *key_bytes = NULL, *header_bytes = "\0";
        Py_ssize_t value_size, key_size = -1, header_size = 1;
        nullable_bytes(value_items[i], &value_bytes, &value_size);
        if (key_items != NULL) {
            nullable_bytes(key_items[i], &key_bytes, &key_size);
        }
        if (header_items != NULL) {
            header_bytes = PyBytes_AS_STRING(header_items[i]);
            header_size = PyBytes_GET_SIZE(header_items[i]);
        }
        uint64_t delta_raw = 0;
        if (timestamp_items != NULL) {
            long long delta;
            if (__builtin_sub_overflow(PyLong_AsLongLong(timestamp_items[i]), base_timestamp,
                                       &delta)) {
                goto changed;
            }
            delta_raw = zigzag(delta);
        }
        Py_ssize_t body = 1 + varint_size(delta_raw) + varint_size(zigzag(i)) +
                          nullable_size(key_size) + nullable_size(value_size) + header_size;
        if (varint_size(zigzag(body)) + body > end - out) {
            goto changed;
        }
        out = write_varint(out, zigzag(body));
        *out++ = 0; /* attributes */
        out = write_varint(out, delta_raw);
        out = write_varint(out, zigzag(i));
        out = write_nullable(out, key_bytes, key_size);
        out = write_nullable(out, value_bytes, value_size);
        memcpy(out, header_bytes, (size_t)header_size);
        out += header_size;
    }
    if (out == end) {
        return result;
    }
changed:
    Py_DECREF(result);
    PyErr_SetString(PyExc_SystemError, "encode_records: the records changed while encoded");
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     decode_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     encode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "lograft.protocol._speedups",
    "The record codec's hot loops in C; lograft.protocol.record_codec and lograft.protocol.batch_builder hold\n"
    "the reference Python code and use these when the extension is built.",
    -1,
    speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&speedups_module);
}
