/* Native walk over the records of one uncompressed magic-2 batch: find the records whose
 * headers an interceptor watches, and append the same number of headers to every record.
 *
 * The pure-Python reference is `protocol.stamping` (`_py_watched`, `_py_append`); both
 * must give the same answers, and tests check that they do. This module exists because the
 * per-record varint walk and the splicing dominate the cost of stamping trace context and
 * audit headers in Python. It is optional: without it Herald uses the Python reference.
 *
 * Safety: every read is bounded by the record's own length, every length is checked
 * against the bytes present before it is used, and a malformed batch raises ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "link_memory.h"
#include "stamp_core.h"

typedef sc_rec rec_pos;

/* One record at *pos (see sc_walk_record); a malformed record raises ValueError. */
static int walk_record(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, rec_pos *r,
                       sc_key_fn on_key, void *arg) {
    size_t p = (size_t)*pos;
    const char *err = sc_walk_record(buf, &p, (size_t)end, r, on_key, arg);
    if (err != NULL) {
        PyErr_SetString(PyExc_ValueError, err);
        return 0;
    }
    *pos = (Py_ssize_t)p;
    return 1;
}

typedef struct {
    PyObject *keys;     /* tuple of bytes */
    PyObject *prefixes; /* tuple of bytes */
    int hit;
} watch;

static int watched_key(void *arg, const uint8_t *key, size_t len) {
    watch *w = (watch *)arg;
    Py_ssize_t i;
    for (i = 0; i < PyTuple_GET_SIZE(w->keys); i++) {
        PyObject *k = PyTuple_GET_ITEM(w->keys, i);
        if ((size_t)PyBytes_GET_SIZE(k) == len && memcmp(PyBytes_AS_STRING(k), key, len) == 0) {
            w->hit = 1;
            return 1;
        }
    }
    for (i = 0; i < PyTuple_GET_SIZE(w->prefixes); i++) {
        PyObject *k = PyTuple_GET_ITEM(w->prefixes, i);
        Py_ssize_t n = PyBytes_GET_SIZE(k);
        if ((size_t)n <= len && memcmp(PyBytes_AS_STRING(k), key, (size_t)n) == 0) {
            w->hit = 1;
            return 1;
        }
    }
    return 0;
}

static int check_bytes_tuple(PyObject *t, const char *what) {
    if (!PyTuple_Check(t)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of bytes", what);
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(t, i))) {
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of bytes", what);
            return 0;
        }
    }
    return 1;
}

static int check_range(Py_buffer *view, Py_ssize_t start, Py_ssize_t end) {
    if (start < 0 || end < start || end > view->len) {
        PyErr_SetString(PyExc_ValueError, "records range outside the buffer");
        return 0;
    }
    return 1;
}

static PyObject *watched(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, count;
    watch w;
    if (!PyArg_ParseTuple(args, "y*nnnOO", &view, &start, &end, &count, &w.keys,
                          &w.prefixes)) {
        return NULL;
    }
    PyObject *out = NULL;
    if (!check_range(&view, start, end) || !check_bytes_tuple(w.keys, "keys") ||
        !check_bytes_tuple(w.prefixes, "prefixes")) {
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) {
        goto done;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = start, n = 0;
    rec_pos r;
    while (pos < end) {
        w.hit = 0;
        if (!walk_record(buf, &pos, end, &r, watched_key, &w)) {
            Py_CLEAR(out);
            goto done;
        }
        if (w.hit) {
            PyObject *index = PyLong_FromSsize_t(n);
            if (index == NULL || PyList_Append(out, index) < 0) {
                Py_XDECREF(index);
                Py_CLEAR(out);
                goto done;
            }
            Py_DECREF(index);
        }
        n++;
    }
    if (n != count) {
        PyErr_Format(PyExc_ValueError, "batch declares %zd records but holds %zd", count, n);
        Py_CLEAR(out);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

static Py_ssize_t varint_size(uint64_t v) {
    return (Py_ssize_t)sc_varint_size(v);
}

#define put_varint(out, v) sc_put_varint((out), (v))
#define zigzag(v) sc_zigzag(v)

/* A column is bytes (the same piece for every record), a list of bytes (one piece per
 * record), or a (key, values) tuple: the wire form of a header key, then per record a value
 * (bytes, or None for a null value) written behind its zigzag length.
 *
 * `append` copies without the GIL, so it works on a snapshot made before: the lists become
 * tuples it holds (another thread may change a list, and free the bytes it held, while the
 * copy runs; a tuple and the bytes objects it holds cannot change). */
typedef struct {
    int kind;       /* SAME: one piece for every record; EACH: a piece per record; KEYED */
    PyObject *same; /* SAME: the piece; KEYED: the key's wire form (borrowed from columns) */
    PyObject *each; /* EACH, KEYED: a tuple of the pieces or values (owned) */
} column_t;

enum { SAME, EACH, KEYED };

static void free_columns(column_t *cols, Py_ssize_t n) {
    for (Py_ssize_t c = 0; cols != NULL && c < n; c++) {
        Py_XDECREF(cols[c].each);
    }
    PyMem_Free(cols);
}

/* The snapshot of columns checked by check_columns; NULL with an exception set. */
static column_t *freeze_columns(PyObject *columns) {
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    column_t *cols = PyMem_Calloc((size_t)(n ? n : 1), sizeof(column_t));
    if (cols == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t c = 0; c < n; c++) {
        PyObject *col = PyTuple_GET_ITEM(columns, c);
        if (PyBytes_CheckExact(col)) {
            cols[c].kind = SAME;
            cols[c].same = col;
            continue;
        }
        PyObject *list = col;
        cols[c].kind = EACH;
        if (PyTuple_CheckExact(col)) {
            cols[c].kind = KEYED;
            cols[c].same = PyTuple_GET_ITEM(col, 0);
            list = PyTuple_GET_ITEM(col, 1);
        }
        if ((cols[c].each = PyList_AsTuple(list)) == NULL) {
            free_columns(cols, n);
            return NULL;
        }
    }
    return cols;
}

static Py_ssize_t piece_size(const column_t *col, Py_ssize_t i) {
    if (col->kind == SAME) {
        return PyBytes_GET_SIZE(col->same);
    }
    PyObject *item = PyTuple_GET_ITEM(col->each, i);
    if (col->kind == EACH) {
        return PyBytes_GET_SIZE(item);
    }
    Py_ssize_t key = PyBytes_GET_SIZE(col->same);
    if (item == Py_None) {
        return key + 1;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(item);
    return key + varint_size(zigzag(n)) + n;
}

/* The wire tail of record i: its piece of each column. */
static Py_ssize_t tail_size(const column_t *cols, Py_ssize_t ncols, Py_ssize_t i) {
    Py_ssize_t size = 0;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        size += piece_size(&cols[c], i);
    }
    return size;
}

static unsigned char *put_bytes(unsigned char *out, PyObject *piece) {
    Py_ssize_t n = PyBytes_GET_SIZE(piece);
    memcpy(out, PyBytes_AS_STRING(piece), n);
    return out + n;
}

static unsigned char *put_tail(unsigned char *out, const column_t *cols, Py_ssize_t ncols,
                               Py_ssize_t i) {
    for (Py_ssize_t c = 0; c < ncols; c++) {
        const column_t *col = &cols[c];
        if (col->kind == SAME) {
            out = put_bytes(out, col->same);
        } else if (col->kind == EACH) {
            out = put_bytes(out, PyTuple_GET_ITEM(col->each, i));
        } else {
            PyObject *value = PyTuple_GET_ITEM(col->each, i);
            out = put_bytes(out, col->same);
            if (value == Py_None) {
                *out++ = 1;  /* zigzag(-1): a null value */
            } else {
                out = put_varint(out, zigzag(PyBytes_GET_SIZE(value)));
                out = put_bytes(out, value);
            }
        }
    }
    return out;
}

static int check_list(PyObject *list, Py_ssize_t count, int nulls) {
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != count) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyBytes_CheckExact(item) && !(nulls && item == Py_None)) {
            return 0;
        }
    }
    return 1;
}

static int check_columns(PyObject *columns, Py_ssize_t count) {
    if (!PyTuple_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "columns must be a tuple");
        return 0;
    }
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(columns); c++) {
        PyObject *col = PyTuple_GET_ITEM(columns, c);
        int ok;
        if (PyBytes_CheckExact(col)) {
            ok = 1;
        } else if (PyTuple_CheckExact(col)) {
            ok = PyTuple_GET_SIZE(col) == 2 && PyBytes_CheckExact(PyTuple_GET_ITEM(col, 0)) &&
                 check_list(PyTuple_GET_ITEM(col, 1), count, 1);
        } else {
            ok = check_list(col, count, 0);
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError,
                            "a column must be bytes, a list of bytes (one per record), or a "
                            "(key, values) tuple with one bytes or None value per record");
            return 0;
        }
    }
    return 1;
}

static PyObject *append(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, count, added;
    PyObject *columns;
    if (!PyArg_ParseTuple(args, "y*nnnnO", &view, &start, &end, &count, &added, &columns)) {
        return NULL;
    }
    PyObject *out = NULL;
    rec_pos *recs = NULL;
    column_t *cols = NULL;
    Py_ssize_t ncols = 0;
    if (!check_range(&view, start, end) || !check_columns(columns, count)) {
        goto done;
    }
    if (added < 0 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "negative count");
        goto done;
    }
    /* A record takes at least 7 bytes, which bounds the count by the input. */
    if (count > (end - start) / 7 + 1) {
        PyErr_Format(PyExc_ValueError, "batch declares %zd records but holds fewer", count);
        goto done;
    }
    ncols = PyTuple_GET_SIZE(columns);
    if ((cols = freeze_columns(columns)) == NULL) {
        goto done;
    }
    recs = PyMem_Malloc(sizeof(rec_pos) * (size_t)(count ? count : 1));
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = start, n = 0, total = 0;
    while (pos < end) {
        if (n >= count) {
            n++;
            break;
        }
        rec_pos *r = &recs[n];
        if (!walk_record(buf, &pos, end, r, NULL, NULL)) {
            goto done;
        }
        Py_ssize_t size = (r->hpos - r->body) + varint_size(zigzag((int64_t)r->count + added)) +
                          (r->end - r->first) + tail_size(cols, ncols, n);
        total += varint_size(zigzag(size)) + size;
        n++;
    }
    if (n != count) {
        PyErr_Format(PyExc_ValueError, "batch declares %zd records but holds %s%zd", count,
                     n > count ? "more than " : "", n > count ? count : n);
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) {
        goto done;
    }
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    /* Copying touches only the fresh `out`, the buffer `view` holds (exported, so it cannot
     * be resized or freed; bytes another thread writes into a bytearray meanwhile change the
     * output, never where it reads: every offset was checked above), and the snapshot of the
     * columns, which nothing else can change or free. Other threads (the event loop) may
     * run meanwhile, so a large batch stamped in a worker does not stall them. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        rec_pos *r = &recs[i];
        uint64_t headers = zigzag((int64_t)r->count + added);
        Py_ssize_t size = (r->hpos - r->body) + varint_size(headers) + (r->end - r->first) +
                          tail_size(cols, ncols, i);
        w = put_varint(w, zigzag(size));
        memcpy(w, buf + r->body, r->hpos - r->body);
        w += r->hpos - r->body;
        w = put_varint(w, headers);
        memcpy(w, buf + r->first, r->end - r->first);
        w += r->end - r->first;
        w = put_tail(w, cols, ncols, i);
    }
    Py_END_ALLOW_THREADS
done:
    free_columns(cols, ncols);
    PyMem_Free(recs);
    PyBuffer_Release(&view);
    return out;
}

/* hex_column(head, raw, n, chunk, spec) -> list of n bytes: see protocol.stamping.hex_column.
 * spec is a tuple of (literal bytes, digits) pairs; digits -1 is one UUID variant digit. */
static PyObject *hex_column(PyObject *self, PyObject *args) {
    Py_buffer head, raw;
    Py_ssize_t n, chunk;
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "y*y*nnO", &head, &raw, &n, &chunk, &spec)) {
        return NULL;
    }
    PyObject *out = NULL;
    sc_cut *cuts = NULL;
    if (n < 0 || chunk < 0 || (chunk > 0 && n > PY_SSIZE_T_MAX / chunk) ||
        raw.len != n * chunk) {
        PyErr_SetString(PyExc_ValueError, "raw must hold n chunks");
        goto done;
    }
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "spec must be a tuple of (bytes, int) pairs");
        goto done;
    }
    /* The spec as cuts, checked against the chunk's digits. */
    Py_ssize_t parts = PyTuple_GET_SIZE(spec), digits = 0;
    cuts = PyMem_Malloc(sizeof(sc_cut) * (size_t)(parts ? parts : 1));
    if (cuts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < parts; s++) {
        PyObject *part = PyTuple_GET_ITEM(spec, s);
        if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(part, 0)) ||
            !PyLong_Check(PyTuple_GET_ITEM(part, 1))) {
            PyErr_SetString(PyExc_TypeError, "spec must be a tuple of (bytes, int) pairs");
            goto done;
        }
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(part, 1));
        if (k < -1 || (k == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "digits must be -1 or more");
            }
            goto done;
        }
        digits += k < 0 ? 1 : k;
        if (digits > 2 * chunk) {
            PyErr_SetString(PyExc_ValueError, "spec takes more digits than a chunk holds");
            goto done;
        }
        PyObject *lit = PyTuple_GET_ITEM(part, 0);
        cuts[s].literal = (const uint8_t *)PyBytes_AS_STRING(lit);
        cuts[s].literal_len = (size_t)PyBytes_GET_SIZE(lit);
        cuts[s].digits = (int)k;
    }
    Py_ssize_t size = head.len + (Py_ssize_t)sc_cut_size(cuts, (size_t)parts);
    out = PyList_New(n);
    if (out == NULL) {
        goto done;
    }
    const unsigned char *bytes = (const unsigned char *)raw.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyBytes_FromStringAndSize(NULL, size);
        if (item == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(item);
        memcpy(w, head.buf, head.len);
        /* the first record's chunk is the last */
        sc_hex_cut(w + head.len, bytes + (n - 1 - i) * chunk, cuts, (size_t)parts);
        PyList_SET_ITEM(out, i, item);
    }
done:
    PyMem_Free(cuts);
    PyBuffer_Release(&head);
    PyBuffer_Release(&raw);
    return out;
}

/* ---- LinkMemory: the C memory of fetched traces (link_memory.c) for Python --------------
 * interceptors/trace_links.py `NativeFetchedTraces` wraps it with the reference's methods;
 * the native relay takes the same memory through `capsule()`. */

typedef struct {
    PyObject_HEAD
    lm_memory *m;
} link_memory_obj;

static const char *REASONS[] = {"unseen", "expired", "evicted"};

static int lmo_init(link_memory_obj *self, PyObject *args, PyObject *kw) {
    long long capacity, max_parents;
    double ttl;
    if (!PyArg_ParseTuple(args, "LdL", &capacity, &ttl, &max_parents)) {
        return -1;
    }
    lm_release(self->m);
    self->m = lm_new(capacity, ttl, max_parents);
    if (self->m == NULL) {
        PyErr_SetString(PyExc_ValueError, "capacity, max_parents >= 1 and ttl_s > 0");
        return -1;
    }
    return 0;
}

static void lmo_dealloc(link_memory_obj *self) {
    lm_release(self->m);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int lmo_ready(link_memory_obj *self) {
    if (self->m == NULL) {
        PyErr_SetString(PyExc_ValueError, "LinkMemory not initialised");
        return 0;
    }
    return 1;
}

static PyObject *lmo_remember(link_memory_obj *self, PyObject *args) {
    Py_buffer scope, trace, topic;
    int partition;
    long long offset;
    double now;
    if (!lmo_ready(self) || !PyArg_ParseTuple(args, "y*y*s*iLd", &scope, &trace, &topic,
                                              &partition, &offset, &now)) {
        return NULL;
    }
    PyObject *out = NULL;
    int64_t evicted, expired;
    if (trace.len != LM_TRACE) {
        PyErr_SetString(PyExc_ValueError, "a trace id is 32 hex digits");
    } else if (!lm_remember(self->m, scope.buf, (size_t)scope.len, trace.buf, topic.buf,
                            (size_t)topic.len, partition, offset, now, &evicted, &expired)) {
        PyErr_NoMemory();
    } else {
        out = Py_BuildValue("LL", (long long)evicted, (long long)expired);
    }
    PyBuffer_Release(&scope);
    PyBuffer_Release(&trace);
    PyBuffer_Release(&topic);
    return out;
}

static PyObject *lmo_parents(link_memory_obj *self, PyObject *args) {
    Py_buffer scope, trace;
    double now;
    if (!lmo_ready(self) || !PyArg_ParseTuple(args, "y*y*d", &scope, &trace, &now)) {
        return NULL;
    }
    PyObject *out = NULL;
    lm_parent *found = NULL;
    if (trace.len != LM_TRACE) {
        PyErr_SetString(PyExc_ValueError, "a trace id is 32 hex digits");
        goto done;
    }
    found = PyMem_Malloc((size_t)lm_max_parents(self->m) * sizeof(lm_parent));
    if (found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t lost[3];
    int64_t n = lm_parents(self->m, scope.buf, (size_t)scope.len, trace.buf, now, found, lost);
    if (n == LM_NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *named;
    if (n < 0) {
        named = PyUnicode_FromString(REASONS[-1 - n]);
    } else {
        named = PyTuple_New((Py_ssize_t)n);
        for (int64_t i = 0; named != NULL && i < n; i++) {
            PyObject *item = Py_BuildValue("s#iL", (const char *)found[i].topic,
                                           (Py_ssize_t)found[i].topic_len,
                                           (int)found[i].partition, (long long)found[i].offset);
            if (item == NULL) {
                Py_CLEAR(named);
                break;
            }
            PyTuple_SET_ITEM(named, (Py_ssize_t)i, item);
        }
        lm_parents_free(found, n);
    }
    if (named == NULL) {
        goto done;
    }
    if (lost[0] | lost[1] | lost[2]) {
        out = Py_BuildValue("N(kkk)", named, (unsigned long)lost[0], (unsigned long)lost[1],
                            (unsigned long)lost[2]);
    } else {
        out = Py_BuildValue("NO", named, Py_None);
    }
done:
    PyMem_Free(found);
    PyBuffer_Release(&scope);
    PyBuffer_Release(&trace);
    return out;
}

static Py_ssize_t lmo_len(link_memory_obj *self) {
    return self->m == NULL ? 0 : (Py_ssize_t)lm_size(self->m);
}

static PyObject *lmo_counters(link_memory_obj *self, PyObject *unused) {
    if (!lmo_ready(self)) {
        return NULL;
    }
    lm_counts c;
    lm_counters(self->m, &c);
    /* In the order interceptors/trace_links.py FETCH_COUNTERS + PRODUCE_COUNTERS names them. */
    return Py_BuildValue("(KKKKKKKKKKK)", c.remembered, c.evicted, c.expired, c.made, c.parents,
                         c.missed[LM_UNSEEN], c.missed[LM_EXPIRED], c.missed[LM_EVICTED],
                         c.lost[LM_LOST_EXPIRED], c.lost[LM_LOST_EVICTED],
                         c.lost[LM_LOST_OVERFLOW]);
}

static void capsule_release(PyObject *capsule) {
    lm_release(PyCapsule_GetPointer(capsule, "herald.link_memory"));
}

static PyObject *lmo_capsule(link_memory_obj *self, PyObject *unused) {
    if (!lmo_ready(self)) {
        return NULL;
    }
    lm_retain(self->m); /* the capsule holds the memory: the engine retains its own */
    PyObject *c = PyCapsule_New(self->m, "herald.link_memory", capsule_release);
    if (c == NULL) {
        lm_release(self->m);
    }
    return c;
}

static PyMethodDef lmo_methods[] = {
    {"remember", (PyCFunction)lmo_remember, METH_VARARGS,
     "remember(scope, trace, topic, partition, offset, now) -> (evicted, expired)"},
    {"parents", (PyCFunction)lmo_parents, METH_VARARGS,
     "parents(scope, trace, now) -> (((topic, partition, offset), ...) or the miss's reason, "
     "(expired, evicted, overflow) parents lost or None)"},
    {"counters", (PyCFunction)lmo_counters, METH_NOARGS,
     "counters() -> what the native relay counted, in the order of trace_links.py's "
     "FETCH_COUNTERS + PRODUCE_COUNTERS"},
    {"capsule", (PyCFunction)lmo_capsule, METH_NOARGS,
     "capsule() -> the memory for the native relay"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods lmo_sequence = {.sq_length = (lenfunc)lmo_len};

static PyTypeObject link_memory_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "protocol._stamp.LinkMemory",
    .tp_basicsize = sizeof(link_memory_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LinkMemory(capacity, ttl_s, max_parents): the bounded memory of fetched traces",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lmo_init,
    .tp_dealloc = (destructor)lmo_dealloc,
    .tp_methods = lmo_methods,
    .tp_as_sequence = &lmo_sequence,
};

static PyMethodDef methods[] = {
    {"hex_column", hex_column, METH_VARARGS,
     "hex_column(head, raw, n, chunk, spec) -> n values cut from the hex digits of raw"},
    {"watched", watched, METH_VARARGS,
     "watched(buf, start, end, count, keys, prefixes) -> indexes of the records with a "
     "header whose key is in keys or starts with one of prefixes"},
    {"append", append, METH_VARARGS,
     "append(buf, start, end, count, added, columns) -> the records with `added` more "
     "headers each, their wire form taken from the columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "protocol._stamp", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__stamp(void) {
    if (PyType_Ready(&link_memory_type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&link_memory_type);
    if (PyModule_AddObject(m, "LinkMemory", (PyObject *)&link_memory_type) < 0) {
        Py_DECREF(&link_memory_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
