/* proxy.native._relay: the native relay engine (relay_engine.c) as a Python type, and the
 * engine's pure pieces (Produce stamping, the Fetch scan, the trace context checks, CRC32C) as
 * functions the tests hold to the Python reference.
 *
 * Only this file touches Python objects. Every call into the engine is made without the GIL:
 * the engine's lock may be held by its thread for one event's socket work, and a thread that
 * waits for it must not keep other Python threads (a worker stamping a large batch) waiting
 * too. Results are copied out of the engine under its lock and turned into Python objects
 * afterwards, with the GIL and without the lock: the engine thread never waits on Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "contracts/features.h"
#include "contracts/native_relay.h"
#include "relay_codec.h"
#include "relay_engine.h"
#include "relay_fetch.h"
#include "relay_frames.h"
#include "relay_stamp.h"
#include "relay_tls.h"
#include "relay_trace.h"
#include "stamp_core.h"

/* ---- plans from their Python form ------------------------------------------------------ */

static int bad_plan(nc_plan *plan, const char *why) {
    nc_plan_free(plan);
    if (!PyErr_Occurred()) {
        if (why != NULL) {
            PyErr_SetString(PyExc_ValueError, why);
        } else {
            PyErr_NoMemory();
        }
    }
    return 0;
}

/* (columns, keys, prefixes, max_batch_records, max_request_records, max_batch_bytes, topic
 * ids[, max_batch_decompressed, max_request_decompressed]), each column (kind, key wire form,
 * value or None, sampled, per batch, keeps), the topic ids 16 bytes each, sorted
 * (proxy/native/stamp_plan.py, fetch_plan.py; without the decompression limits, compressed
 * batches go to Python): 0 with a Python exception set when it is not one. */
static int plan_parse(PyObject *obj, nc_plan *plan) {
    memset(plan, 0, sizeof *plan);
    PyObject *cols, *keys, *prefixes, *ids, *links = Py_None;
    long long mbr, mrr, mbb, mbd = 0, mrd = 0;
    if (!PyArg_ParseTuple(obj, "O!O!O!LLLO!|LLO", &PyTuple_Type, &cols, &PyTuple_Type, &keys,
                          &PyTuple_Type, &prefixes, &mbr, &mrr, &mbb, &PyBytes_Type, &ids, &mbd,
                          &mrd, &links)) {
        return 0;
    }
    Py_ssize_t nc = PyTuple_GET_SIZE(cols), nk = PyTuple_GET_SIZE(keys),
               np = PyTuple_GET_SIZE(prefixes);
    if (!nc_plan_init(plan, (size_t)nc, (size_t)(nk + np))) {
        return bad_plan(plan, NULL);
    }
    if (PyBytes_GET_SIZE(ids) % 16) {
        return bad_plan(plan, "topic ids must be 16 bytes each");
    }
    if (!nc_plan_topic_ids(plan, (const uint8_t *)PyBytes_AS_STRING(ids),
                           (size_t)PyBytes_GET_SIZE(ids))) {
        return bad_plan(plan, NULL);
    }
    plan->max_batch_records = mbr;
    plan->max_request_records = mrr;
    plan->max_batch_bytes = mbb;
    plan->max_batch_decompressed = mbd;
    plan->max_request_decompressed = mrd;
    if (links != Py_None) {
        /* (memory capsule, scope, link header key's wire form, linked records to Python[,
         * the names of the topic ids, for the Fetch scan, or None[, the lost parents header
         * key's wire form, for stamping]]) */
        PyObject *capsule, *names_obj = Py_None;
        Py_buffer scope, key, names = {0}, lost = {0};
        int hits_python;
        if (!PyArg_ParseTuple(links, "Oy*y*p|Oy*", &capsule, &scope, &key, &hits_python,
                              &names_obj, &lost)) {
            return bad_plan(plan, NULL);
        }
        plan->link_hits_python = hits_python;
        lm_memory *m = PyCapsule_GetPointer(capsule, "herald.link_memory");
        int ok = m != NULL && nc_plan_links(plan, m, scope.buf, (size_t)scope.len, key.buf,
                                            (size_t)key.len);
        if (ok && lost.obj != NULL) {
            ok = nc_plan_lost_key(plan, lost.buf, (size_t)lost.len);
        }
        if (ok && names_obj != Py_None &&
            PyObject_GetBuffer(names_obj, &names, PyBUF_SIMPLE) != 0) {
            ok = 0;
        }
        if (ok && names.obj != NULL) {
            ok = nc_plan_id_names(plan, names.buf, (size_t)names.len);
            if (!ok) {
                PyErr_SetString(PyExc_ValueError, "a name for each topic id");
            }
        }
        PyBuffer_Release(&scope);
        PyBuffer_Release(&key);
        if (names.obj != NULL) {
            PyBuffer_Release(&names);
        }
        if (lost.obj != NULL) {
            PyBuffer_Release(&lost);
        }
        if (!ok) {
            return bad_plan(plan, NULL);
        }
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        int kind, sampled, per_batch, keeps;
        PyObject *key, *value;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cols, i), "iO!Oppp", &kind, &PyBytes_Type, &key,
                              &value, &sampled, &per_batch, &keeps)) {
            return bad_plan(plan, NULL);
        }
        if (value != Py_None && !PyBytes_Check(value)) {
            return bad_plan(plan, "a column is (kind 0-4, key bytes, bytes or None, bool, "
                                  "bool, bool)");
        }
        const char *why;
        if (!nc_plan_column(plan, kind, (const uint8_t *)PyBytes_AS_STRING(key),
                            (size_t)PyBytes_GET_SIZE(key),
                            value == Py_None ? NULL : (const uint8_t *)PyBytes_AS_STRING(value),
                            value == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(value), sampled,
                            per_batch, keeps, &why)) {
            return bad_plan(plan, why);
        }
    }
    for (Py_ssize_t i = 0; i < nk + np; i++) {
        PyObject *k = i < nk ? PyTuple_GET_ITEM(keys, i) : PyTuple_GET_ITEM(prefixes, i - nk);
        if (!PyBytes_Check(k)) {
            return bad_plan(plan, "watched keys and prefixes must be bytes");
        }
        if (!nc_plan_key(plan, (const uint8_t *)PyBytes_AS_STRING(k),
                         (size_t)PyBytes_GET_SIZE(k), i >= nk)) {
            return bad_plan(plan, NULL);
        }
    }
    return 1;
}

/* (batches, records, kept, kept_batches, compressed, links): compressed counts the compressed
 * batches by codec id, (gzip, snappy, lz4, zstd) at 1-4; links the link counts, each at its
 * place in protocol/contracts/native_relay.h (LINK_COUNT_*). */
static PyObject *counts_tuple(const nc_counts *c) {
    uint64_t l[LINK_COUNT_N];
    l[LINK_COUNT_LINKED] = c->linked;
    l[LINK_COUNT_PARENTS] = c->parents;
    l[LINK_COUNT_MISSED_UNSEEN] = c->missed[0];
    l[LINK_COUNT_MISSED_EXPIRED] = c->missed[1];
    l[LINK_COUNT_MISSED_EVICTED] = c->missed[2];
    l[LINK_COUNT_LINKED_BATCHES] = c->linked_batches;
    l[LINK_COUNT_REMEMBERED] = c->remembered;
    l[LINK_COUNT_EVICTED] = c->evicted;
    l[LINK_COUNT_EXPIRED] = c->expired;
    l[LINK_COUNT_LOST_EXPIRED] = c->lost[0];
    l[LINK_COUNT_LOST_EVICTED] = c->lost[1];
    l[LINK_COUNT_LOST_OVERFLOW] = c->lost[2];
    l[LINK_COUNT_MARKED] = c->marked;
    l[LINK_COUNT_LOST_HEADERS] = c->lost_headers;
    PyObject *links = PyTuple_New(LINK_COUNT_N);
    if (links == NULL) {
        return NULL;
    }
    for (int i = 0; i < LINK_COUNT_N; i++) {
        PyObject *n = PyLong_FromUnsignedLongLong((unsigned long long)l[i]);
        if (n == NULL) {
            Py_DECREF(links);
            return NULL;
        }
        PyTuple_SET_ITEM(links, i, n);
    }
    const uint64_t *z = c->compressed;
    return Py_BuildValue("(KKKK(KKKKKKKK)N)", (unsigned long long)c->batches,
                         (unsigned long long)c->records, (unsigned long long)c->kept,
                         (unsigned long long)c->kept_batches, (unsigned long long)z[0],
                         (unsigned long long)z[1], (unsigned long long)z[2],
                         (unsigned long long)z[3], (unsigned long long)z[4],
                         (unsigned long long)z[5], (unsigned long long)z[6],
                         (unsigned long long)z[7], links);
}

/* ---- the engine ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ne_engine *e;
} engine_obj;

static int engine_init(engine_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"bounds", "grow_limit", NULL};
    PyObject *bounds;
    Py_ssize_t grow_limit = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|n", kwlist, &bounds, &grow_limit)) {
        return -1;
    }
    if (self->e != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "engine already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(bounds, "bounds must be a sequence of floats");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    if (nb > NE_MAX_BOUNDS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many latency bounds");
        return -1;
    }
    double values[NE_MAX_BOUNDS];
    for (Py_ssize_t i = 0; i < nb; i++) {
        values[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        return -1;
    }
    ne_engine *e = ne_create(values, (int)nb);
    if (e == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (grow_limit >= 0) {
        ne_set_grow_limit(e, (size_t)grow_limit);
    }
    if (ne_start(e) != NE_OK) {
        ne_destroy(e);
        PyErr_SetString(PyExc_OSError, "cannot start the relay thread");
        return -1;
    }
    self->e = e;
    return 0;
}

static void engine_dealloc(engine_obj *self) {
    if (self->e != NULL) {
        Py_BEGIN_ALLOW_THREADS
        ne_destroy(self->e);
        Py_END_ALLOW_THREADS
        self->e = NULL;
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static ne_engine *engine_of(engine_obj *self) {
    if (self->e == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "engine not initialised");
    }
    return self->e;
}

/* A (plan, key, cap) argument of `register`: 0 with a Python exception set when it is not
 * one. */
static int plan_arg(PyObject *arg, nc_plan *plan, long long *key, size_t *cap) {
    PyObject *wire;
    Py_ssize_t want;
    if (!PyArg_ParseTuple(arg, "OLn", &wire, key, &want) || !plan_parse(wire, plan)) {
        return 0;
    }
    *cap = want > 0 ? (size_t)want : 0;
    return 1;
}

/* The first fields of CPython's `_ssl._SSLSocket` (Modules/_ssl.c, `PySSLSocket`), the same
 * from 3.7 to 3.14: the connection's OpenSSL `SSL` is the second. The ssl module has no call
 * that gives it out, so it is read here, and trusted only once checked: the object is of that
 * very type, and the SSL's application data is that object (newPySSLSocket sets it so). */
typedef struct {
    PyObject_HEAD
    PyObject *socket_weakref;
    struct ssl_st *ssl;
} ssl_object_head;

/* A TLS argument of `register`: None, or the `_ssl._SSLSocket` (an `ssl.SSLSocket`'s
 * `_sslobj`) of the connection on `fd`. 0 with a Python exception set when the engine cannot
 * carry it on: the session then stays on the Python path. */
static int tls_arg(PyObject *obj, int fd, struct ssl_st **out) {
    *out = NULL;
    if (obj == Py_None) {
        return 1;
    }
#if PY_VERSION_HEX < 0x030700F0 || PY_VERSION_HEX >= 0x030F0000
    PyErr_SetString(PyExc_ValueError, "TLS on the engine: a Python whose ssl module layout "
                                      "the engine does not know");
    return 0;
#else
    PyObject *ssl_module = PyImport_ImportModule("_ssl");
    if (ssl_module == NULL) {
        return 0;
    }
    PyObject *type = PyObject_GetAttrString(ssl_module, "_SSLSocket");
    Py_DECREF(ssl_module);
    if (type == NULL) {
        return 0;
    }
    int same = (PyObject *)Py_TYPE(obj) == type;
    Py_DECREF(type);
    if (!same) {
        PyErr_SetString(PyExc_TypeError, "TLS on the engine: an _ssl._SSLSocket is needed");
        return 0;
    }
    struct ssl_st *ssl = ((ssl_object_head *)obj)->ssl;
    const char *why = nt_check(ssl, obj, fd);
    if (why != NULL) {
        PyErr_Format(PyExc_ValueError, "TLS on the engine: %s", why);
        return 0;
    }
    *out = ssl;
    return 1;
#endif
}

static PyObject *engine_register(engine_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"session_id", "client_fd", "upstream_fd", "table", "max_frame",
                             "max_in_flight", "buffer_size", "idle_timeout", "frame_timeout",
                             "prefill", "stamp", "fetch", "frame_age", "handover_s",
                             "client_tls", "upstream_tls", NULL};
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    ne_session_args a = {0};
    Py_buffer table, prefill = {0};
    long long max_frame;
    Py_ssize_t max_in_flight, buf_size;
    PyObject *stamp = Py_None, *fetch = Py_None, *client_tls = Py_None, *upstream_tls = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Liiy*Lnnddy*|OOddOO", kwlist, &a.id,
                                     &a.client_fd, &a.upstream_fd, &table, &max_frame,
                                     &max_in_flight, &buf_size, &a.idle_s, &a.frame_s,
                                     &prefill, &stamp, &fetch, &a.frame_age, &a.handover_s,
                                     &client_tls, &upstream_tls)) {
        return NULL;
    }
    PyObject *result = NULL;
    nc_plan stamp_plan = {0}, fetch_plan = {0};
    if (!tls_arg(client_tls, a.client_fd, &a.client_tls) ||
        !tls_arg(upstream_tls, a.upstream_fd, &a.upstream_tls)) {
        goto done;
    }
    if (table.len != NE_TABLE_SIZE) {
        PyErr_Format(PyExc_ValueError, "table must be %d bytes", NE_TABLE_SIZE);
        goto done;
    }
    if (buf_size < 4096 || prefill.len > buf_size || max_in_flight < 1) {
        PyErr_SetString(PyExc_ValueError, "buffer_size below 4096, prefill above it, or "
                                          "max_in_flight below 1");
        goto done;
    }
    if (stamp != Py_None) {
        if (!plan_arg(stamp, &stamp_plan, &a.stamp_key, &a.stamp_cap)) {
            goto done;
        }
        a.stamp = &stamp_plan;
    }
    if (fetch != Py_None) {
        if (!plan_arg(fetch, &fetch_plan, &a.fetch_key, &a.fetch_cap)) {
            goto done;
        }
        a.fetch = &fetch_plan;
    }
    a.table = table.buf;
    a.max_frame = max_frame;
    a.max_in_flight = (size_t)max_in_flight;
    a.buffer_size = (size_t)buf_size;
    a.prefill = prefill.buf;
    a.prefill_len = (size_t)prefill.len;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = ne_register(e, &a);
    Py_END_ALLOW_THREADS
    if (r == NE_EXISTS) {
        PyErr_Format(PyExc_ValueError, "session %lld is already registered", a.id);
    } else if (r == NE_NOMEM) {
        PyErr_NoMemory();
    } else if (r != NE_OK) {
        PyErr_SetString(PyExc_ValueError, "a session the engine cannot take");
    } else {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    nc_plan_free(&stamp_plan); /* emptied by ne_register when the engine took it */
    nc_plan_free(&fetch_plan);
    PyBuffer_Release(&table);
    if (prefill.obj != NULL) {
        PyBuffer_Release(&prefill);
    }
    return result;
}

static PyObject *engine_stop(engine_obj *self, PyObject *arg) {
    ne_engine *e = engine_of(self);
    long long id = PyLong_AsLongLong(arg);
    if (e == NULL || (id == -1 && PyErr_Occurred())) {
        return NULL;
    }
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = ne_stop(e, id);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(found);
}

static PyObject *engine_events(engine_obj *self, PyObject *unused) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    long long *ids;
    size_t n;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = ne_events(e, &ids, &n);
    Py_END_ALLOW_THREADS
    if (r != NE_OK) {
        return PyErr_NoMemory();
    }
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out != NULL && i < n; i++) {
        PyObject *id = PyLong_FromLongLong(ids[i]);
        if (id == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, id);
    }
    free(ids);
    return out;
}

/* Take a session back: (reason, detail, client bytes, upstream bytes, in-flight entries,
 * forwarded, tail, frame age). A session still running is detached at once. */
static PyObject *engine_take(engine_obj *self, PyObject *arg) {
    ne_engine *e = engine_of(self);
    long long id = PyLong_AsLongLong(arg);
    if (e == NULL || (id == -1 && PyErr_Occurred())) {
        return NULL;
    }
    ne_handover h;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = ne_take(e, id, &h);
    Py_END_ALLOW_THREADS
    if (r == NE_MISSING) {
        PyErr_Format(PyExc_KeyError, "no session %lld", id);
        return NULL;
    }
    if (r != NE_OK) {
        return PyErr_NoMemory();
    }
    PyObject *out = NULL;
    PyObject *entries = PyList_New((Py_ssize_t)h.n_in_flight);
    for (size_t i = 0; entries != NULL && i < h.n_in_flight; i++) {
        ne_entry *p = &h.in_flight[i];
        PyObject *t = Py_BuildValue("(iiid)", (int)p->corr, (int)p->api, (int)p->ver,
                                    p->received);
        if (t == NULL) {
            Py_CLEAR(entries);
            break;
        }
        PyList_SET_ITEM(entries, (Py_ssize_t)i, t);
    }
    if (entries != NULL) {
        out = Py_BuildValue("(ssy#y#OKnd)", h.reason, h.detail, (const char *)h.client,
                            (Py_ssize_t)h.client_len, (const char *)h.upstream,
                            (Py_ssize_t)h.upstream_len, entries,
                            (unsigned long long)h.forwarded, (Py_ssize_t)h.tail, h.frame_age);
    }
    Py_XDECREF(entries);
    ne_handover_free(&h);
    return out;
}

static PyObject *counts_of(const uint64_t *counts, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(counts[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* What was counted since the last call: (bytes by direction, {(api, version): (requests,
 * latency counts, latency sum, upstream counts, upstream sum)}). */
static PyObject *engine_collect(engine_obj *self, PyObject *unused) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    ne_counters c;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = ne_collect(e, &c);
    Py_END_ALLOW_THREADS
    if (r != NE_OK) {
        return PyErr_NoMemory();
    }
    PyObject *out = NULL;
    PyObject *pairs = PyDict_New();
    for (size_t i = 0; pairs != NULL && i < c.npairs; i++) {
        ne_pair_counts *row = &c.pairs[i];
        PyObject *key = Py_BuildValue("(ii)", row->api, row->ver);
        PyObject *lat = counts_of(row->lat, c.nbuckets);
        PyObject *up = counts_of(row->up, c.nbuckets);
        PyObject *val = NULL;
        if (key != NULL && lat != NULL && up != NULL) {
            val = Py_BuildValue("(KOdOd)", (unsigned long long)row->requests, lat, row->lat_sum,
                                up, row->up_sum);
        }
        if (val == NULL || PyDict_SetItem(pairs, key, val) != 0) {
            Py_CLEAR(pairs);
        }
        Py_XDECREF(key);
        Py_XDECREF(lat);
        Py_XDECREF(up);
        Py_XDECREF(val);
    }
    if (pairs != NULL) {
        out = Py_BuildValue("((KKKK)O)", (unsigned long long)c.bytes[BYTES_CLIENT_TO_PROXY],
                            (unsigned long long)c.bytes[BYTES_PROXY_TO_UPSTREAM],
                            (unsigned long long)c.bytes[BYTES_UPSTREAM_TO_PROXY],
                            (unsigned long long)c.bytes[BYTES_PROXY_TO_CLIENT], pairs);
    }
    Py_XDECREF(pairs);
    ne_counters_free(&c);
    return out;
}

/* What was stamped since the last call, {stamp key: (batches, records, kept, kept_batches)},
 * and reset. */
static PyObject *engine_collect_stamped(engine_obj *self, PyObject *unused) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    ne_stamp_counts *rows;
    size_t n;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = ne_collect_stamped(e, &rows, &n);
    Py_END_ALLOW_THREADS
    if (r != NE_OK) {
        return PyErr_NoMemory();
    }
    PyObject *out = PyDict_New();
    for (size_t i = 0; i < n && out != NULL; i++) {
        PyObject *key = PyLong_FromLongLong(rows[i].key);
        PyObject *val = counts_tuple(&rows[i].counts);
        if (key == NULL || val == NULL || PyDict_SetItem(out, key, val) != 0) {
            Py_CLEAR(out);
        }
        Py_XDECREF(key);
        Py_XDECREF(val);
    }
    free(rows);
    return out;
}

static PyObject *engine_close(engine_obj *self, PyObject *unused) {
    if (self->e != NULL) {
        Py_BEGIN_ALLOW_THREADS
        ne_close(self->e);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *engine_notify_fd(engine_obj *self, void *closure) {
    ne_engine *e = engine_of(self);
    return e == NULL ? NULL : PyLong_FromLong(ne_notify_fd(e));
}

static PyObject *engine_spliced(engine_obj *self, void *closure) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    uint64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = ne_spliced(e);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong((unsigned long long)n);
}

static PyObject *engine_grown(engine_obj *self, void *closure) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    size_t n;
    Py_BEGIN_ALLOW_THREADS
    n = ne_grown(e);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(n);
}

static PyObject *engine_tls_bytes(engine_obj *self, void *closure) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    uint64_t n[BYTES_N];
    Py_BEGIN_ALLOW_THREADS
    ne_tls_bytes(e, n);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(KKKK)", (unsigned long long)n[BYTES_CLIENT_TO_PROXY],
                         (unsigned long long)n[BYTES_PROXY_TO_UPSTREAM],
                         (unsigned long long)n[BYTES_UPSTREAM_TO_PROXY],
                         (unsigned long long)n[BYTES_PROXY_TO_CLIENT]);
}

static PyObject *engine_walks(engine_obj *self, void *closure) {
    ne_engine *e = engine_of(self);
    if (e == NULL) {
        return NULL;
    }
    uint64_t n[NE_WALK_KINDS];
    Py_BEGIN_ALLOW_THREADS
    ne_walks(e, n);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(KKK)", (unsigned long long)n[NE_WALK_TURNS],
                         (unsigned long long)n[NE_WALK_DEADLINES],
                         (unsigned long long)n[NE_WALK_TLS]);
}

static PyMethodDef engine_methods[] = {
    {"register", (PyCFunction)(void (*)(void))engine_register, METH_VARARGS | METH_KEYWORDS,
     "Hand a session's descriptors to the engine."},
    {"stop", (PyCFunction)engine_stop, METH_O,
     "Ask a session to hand over at the next frame boundary."},
    {"events", (PyCFunction)engine_events, METH_NOARGS,
     "Ids of the sessions handed over since the last call."},
    {"take", (PyCFunction)engine_take, METH_O,
     "Take a session back (detaching it if it still runs)."},
    {"collect", (PyCFunction)engine_collect, METH_NOARGS,
     "Counters since the last call, and reset them."},
    {"collect_stamped", (PyCFunction)engine_collect_stamped, METH_NOARGS,
     "What was stamped since the last call, by stamp key, and reset."},
    {"close", (PyCFunction)engine_close, METH_NOARGS, "Stop the engine's thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef engine_getset[] = {
    {"notify_fd", (getter)engine_notify_fd, NULL, "Readable when events() has news.", NULL},
    {"tls_bytes", (getter)engine_tls_bytes, NULL,
     "Of the bytes moved (client->proxy, proxy->upstream, upstream->proxy, proxy->client), "
     "those through TLS sides (since the engine began).", NULL},
    {"grown", (getter)engine_grown, NULL,
     "Bytes session buffers have grown by past their base size, now (at most grow_limit).",
     NULL},
    {"walks", (getter)engine_walks, NULL,
     "(turns, walks over every session for deadlines, walks for TLS bytes) since the engine "
     "began: a turn walks the sessions only when a deadline or a TLS side asks for it.",
     NULL},
    {"spliced", (getter)engine_spliced, NULL,
     "Bytes moved socket to socket through a pipe, never copied (since the engine began).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proxy.native._relay.Engine",
    .tp_basicsize = sizeof(engine_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_doc = "A native relay thread serving many plaintext sessions.",
};

/* ---- the pure pieces, for tests ---------------------------------------------------------- */

typedef struct {
    Py_buffer *streams[2];
    size_t at[2];
} given_t;

static int given_draw(void *arg, int stream, uint8_t *dst, size_t n) {
    given_t *g = arg;
    Py_buffer *b = g->streams[stream];
    if ((size_t)b->len - g->at[stream] < n) {
        return 0;
    }
    memcpy(dst, (const uint8_t *)b->buf + g->at[stream], n);
    g->at[stream] += n;
    return 1;
}

/* stamp_produce(frame, plan, trace_draws, msg_draws, now_ms): the engine's rewrite of a
 * Produce request with the given random draws and time. */
static PyObject *py_stamp_produce(PyObject *self, PyObject *args) {
    Py_buffer frame, trace, msg;
    PyObject *plan_obj;
    long long now_ms;
    if (!PyArg_ParseTuple(args, "y*Oy*y*L", &frame, &plan_obj, &trace, &msg, &now_ms)) {
        return NULL;
    }
    PyObject *out = NULL;
    nc_plan plan;
    if (plan_parse(plan_obj, &plan)) {
        given_t g = {{&trace, &msg}, {0, 0}};
        nc_buf buf = {0};
        nc_counts counts;
        const char *why = NULL;
        int r = nc_stamp_produce(frame.buf, (size_t)frame.len, &plan, given_draw, &g, now_ms,
                                 &buf, &counts, &why);
        if (r == NC_NOMEM) {
            PyErr_NoMemory();
        } else if (r == NC_PYTHON) {
            out = Py_BuildValue("(Os)", Py_None, why);
        } else {
            PyObject *tuple = counts_tuple(&counts);
            out = tuple == NULL ? NULL
                                : Py_BuildValue("(y#O)", (const char *)buf.buf,
                                                (Py_ssize_t)buf.len, tuple);
            Py_XDECREF(tuple);
        }
        free(buf.buf);
        nc_plan_free(&plan);
    }
    PyBuffer_Release(&frame);
    PyBuffer_Release(&trace);
    PyBuffer_Release(&msg);
    return out;
}

/* scan_fetch(frame, api, version, plan, check_tags): the engine's verdict on a Fetch (or
 * ShareFetch) response. */
static PyObject *py_scan_fetch(PyObject *self, PyObject *args) {
    Py_buffer frame;
    int api, ver, check_tags;
    PyObject *plan_obj;
    if (!PyArg_ParseTuple(args, "y*iiOp", &frame, &api, &ver, &plan_obj, &check_tags)) {
        return NULL;
    }
    PyObject *out = NULL;
    nc_plan plan;
    if (plan_parse(plan_obj, &plan)) {
        nc_counts counts;
        const char *why = NULL;
        if (nf_scan_fetch(frame.buf, (size_t)frame.len, api, ver, &plan, check_tags, &counts,
                          &why) == NC_OK) {
            out = counts_tuple(&counts);
        } else {
            out = Py_BuildValue("(Os)", Py_None, why);
        }
        nc_plan_free(&plan);
    }
    PyBuffer_Release(&frame);
    return out;
}

typedef int (*check_fn)(const uint8_t *, int64_t);

static PyObject *py_check(PyObject *arg, check_fn check) {
    if (arg == Py_None) {
        return PyBool_FromLong(check(NULL, -1));
    }
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes or None");
        return NULL;
    }
    return PyBool_FromLong(
        check((const uint8_t *)PyBytes_AS_STRING(arg), (int64_t)PyBytes_GET_SIZE(arg)));
}

static PyObject *py_valid_traceparent(PyObject *self, PyObject *arg) {
    return py_check(arg, nt_valid_traceparent);
}

static PyObject *py_valid_tracestate(PyObject *self, PyObject *arg) {
    return py_check(arg, nt_valid_tracestate);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    int table = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &data, &table)) {
        return NULL;
    }
    uint32_t crc = table ? sc_crc32c_table(0, data.buf, (size_t)data.len)
                         : sc_crc32c(0, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- what the engine can do ------------------------------------------------------------ */

static PyObject *names_tuple(const char *const *names, size_t n) {
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; t != NULL && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, name);
    }
    return t;
}

/* capabilities(): what this build of the engine does, from the constants its sources act on,
 * so that Python decides which path a session or frame takes without restating any of it
 * (proxy/native/path_choice.py). */
static PyObject *py_capabilities(PyObject *self, PyObject *unused) {
    static const char *const table_values[] = NE_TABLE_VALUE_NAMES;
    static const char *const kinds[] = NC_KIND_NAMES;
    /* Uncompressed batches, and those of every codec relay_codec.c reads and writes. */
    static const char *const codec_names[] = NK_CODEC_NAMES;
    const char *native_codecs[sizeof codec_names / sizeof *codec_names];
    size_t n_codecs = 0;
    for (size_t i = 0; i < sizeof codec_names / sizeof *codec_names; i++) {
        if (i == NK_NONE || (NK_NATIVE_CODECS & (1u << i))) {
            native_codecs[n_codecs++] = codec_names[i];
        }
    }
    _Static_assert(sizeof table_values / sizeof *table_values == NE_T_COUNT,
                   "a table value without a name");
    _Static_assert(sizeof kinds / sizeof *kinds == NC_TRACEPARENT + 1,
                   "a column kind without a name");
    PyObject *reasons = PyDict_New();
    for (int i = 1; reasons != NULL && i < NE_N_REASONS; i++) {
        PyObject *kind = PyUnicode_FromString(NE_REASON_KINDS[i]);
        if (kind == NULL || PyDict_SetItemString(reasons, NE_REASONS[i], kind) != 0) {
            Py_CLEAR(reasons);
        }
        Py_XDECREF(kind);
    }
    PyObject *values = names_tuple(table_values, NE_T_COUNT);
    PyObject *columns = names_tuple(kinds, sizeof kinds / sizeof *kinds);
    /* relay_stamp.c and relay_fetch.c both act on NK_NATIVE_CODECS. */
    PyObject *stamped = names_tuple(native_codecs, n_codecs);
    PyObject *scanned = names_tuple(native_codecs, n_codecs);
    PyObject *out = NULL;
    if (reasons != NULL && values != NULL && columns != NULL && stamped != NULL &&
        scanned != NULL) {
        out = Py_BuildValue(
            "{s:i,s:i,s:O,s:O,s:{s:i,s:(ii),s:O,s:O},s:{s:i,s:(ii),s:O,s:i,s:(ii)},"
            "s:{i:(ii),i:(ii)},s:O,s:k}",
            "max_api", NE_MAX_API, "max_version", NE_MAX_VER, "table_values", values,
            "reasons", reasons,
            "stamp", "api", NR_PRODUCE, "versions", NC_PRODUCE_MIN_VERSION,
            NR_PRODUCE_MAX_VERSION, "codecs", stamped, "columns", columns,
            "scan", "api", NR_FETCH, "versions", NF_MIN_VERSION, NF_MAX_VERSION, "codecs",
            scanned, "share_api", NR_SHARE_FETCH, "share_versions", NF_SHARE_MIN_VERSION,
            NF_SHARE_MAX_VERSION,
            "tags", NR_PRODUCE, PRODUCE_NODE_ENDPOINTS_VERSION, NR_PRODUCE_MAX_VERSION,
            NR_FETCH, FETCH_NODE_ENDPOINTS_VERSION, NR_FETCH_MAX_VERSION,
            "tls", NE_TLS ? Py_True : Py_False, "openssl_version",
            (unsigned long)nt_library_version());
    }
    Py_XDECREF(reasons);
    Py_XDECREF(values);
    Py_XDECREF(columns);
    Py_XDECREF(stamped);
    Py_XDECREF(scanned);
    return out;
}

/* codec_decompress(codec, data, limit) -> bytes, or (None, 'too large' or why): the engine's
 * reading of a compressed records section. */
static PyObject *py_codec_decompress(PyObject *self, PyObject *args) {
    int codec;
    Py_buffer data;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "iy*n", &codec, &data, &limit)) {
        return NULL;
    }
    if (limit < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "limit must be >= 0");
        return NULL;
    }
    nk_buf out = {0};
    const char *why = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = nk_decompress(codec, data.buf, (size_t)data.len, (size_t)limit, &out, &why);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *result;
    if (r == NK_NOMEM) {
        result = PyErr_NoMemory();
    } else if (r == NK_OK) {
        result = PyBytes_FromStringAndSize((const char *)out.buf, (Py_ssize_t)out.len);
    } else {
        result = Py_BuildValue("(Os)", Py_None, r == NK_TOO_LARGE ? "too large" : why);
    }
    nk_buf_free(&out);
    return result;
}

/* codec_compress(codec, data) -> bytes: the engine's encoding of a records section. */
static PyObject *py_codec_compress(PyObject *self, PyObject *args) {
    int codec;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*", &codec, &data)) {
        return NULL;
    }
    nk_buf out = {0};
    const char *why = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = nk_compress(codec, data.buf, (size_t)data.len, &out, &why);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *result;
    if (r == NK_NOMEM) {
        result = PyErr_NoMemory();
    } else if (r != NK_OK) {
        PyErr_SetString(PyExc_ValueError, why);
        result = NULL;
    } else {
        result = PyBytes_FromStringAndSize((const char *)out.buf, (Py_ssize_t)out.len);
    }
    nk_buf_free(&out);
    return result;
}

static PyMethodDef module_methods[] = {
    {"capabilities", py_capabilities, METH_NOARGS,
     "capabilities() -> what the engine does: {max_api, max_version, table_values (names by "
     "value), reasons ({hand-over reason: resume, deadline, upstream or close}), stamp ({api, "
     "versions (first, last), codecs, columns}), scan ({api, versions, codecs, share_api, "
     "share_versions: the ShareFetch versions it scans, whose leader hints it reads}), tags ({api: "
     "versions whose responses' top-level tagged fields it reads}), tls, openssl_version (the "
     "OpenSSL the engine runs, OPENSSL_VERSION_NUMBER)}"},
    {"stamp_produce", py_stamp_produce, METH_VARARGS,
     "stamp_produce(frame, plan, trace_draws, msg_draws, now_ms) -> (new frame, (batches, "
     "records, kept, kept_batches, compressed by codec)), or (None, why) when the request goes to Python: the "
     "engine's rewrite"},
    {"valid_traceparent", py_valid_traceparent, METH_O,
     "valid_traceparent(value) -> the engine's interceptors.tracing.valid_traceparent"},
    {"valid_tracestate", py_valid_tracestate, METH_O,
     "valid_tracestate(value) -> whether interceptors.tracing.parse_tracestate accepts it, "
     "as the engine decides"},
    {"scan_fetch", py_scan_fetch, METH_VARARGS,
     "scan_fetch(frame, api, version, plan, check_tags) -> (batches, records) when the Fetch "
     "(or ShareFetch) response passes as it is, or (None, why) when it goes to Python: the "
     "engine's verdict"},
    {"crc32c", py_crc32c, METH_VARARGS,
     "crc32c(data, table=False) -> the CRC32C the engine writes into record batches"},
    {"codec_decompress", py_codec_decompress, METH_VARARGS,
     "codec_decompress(codec, data, limit) -> the records section, or (None, why) ('too "
     "large' past limit): how the engine reads a compressed batch"},
    {"codec_compress", py_codec_compress, METH_VARARGS,
     "codec_compress(codec, data) -> how the engine compresses a stamped batch's records"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "proxy.native._relay", NULL, -1, module_methods,
};

PyMODINIT_FUNC PyInit__relay(void) {
    if (PyType_Ready(&engine_type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&engine_type);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&engine_type) < 0 ||
        PyModule_AddIntConstant(m, "MAX_API", NE_MAX_API) < 0 ||
        PyModule_AddIntConstant(m, "MAX_VERSION", NE_MAX_VER) < 0) {
        return NULL;
    }
    return m;
}
