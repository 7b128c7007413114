/* fdatasync on a thread that never takes the GIL.
 *
 * A partition's group commit (replica/partition.py) must not block the node's event loop for
 * the length of an fdatasync, and a Python worker thread costs the loop more than it saves:
 * that thread needs the GIL to start the call and again to report it, and every hand-over of
 * the GIL between two threads is a cross-CPU wake-up. Here the thread is plain C: it takes
 * jobs (lists of descriptors) from a queue, fdatasyncs and closes them, and reports each job
 * through an eventfd that the event loop watches. Python code runs only on the loop.
 *
 * Linux only (eventfd); the Python side falls back to a worker thread where this module is
 * missing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

typedef struct fsync_job {
    struct fsync_job *next;
    unsigned long long id;
    int error;      /* the first errno of the job's fdatasyncs, 0 if all succeeded */
    double seconds; /* how long the fdatasyncs took */
    Py_ssize_t count;
    int fds[];
} fsync_job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mutex;
    pthread_cond_t queued;    /* the worker waits on it: a job arrived, or stop */
    pthread_cond_t finished;  /* wait() waits on it: a job finished */
    pthread_t thread;
    int running;              /* the thread was started and not yet joined */
    int stopping;
    int event_fd;
    unsigned long long next_id;
    unsigned long long finished_below; /* jobs finish in id order: every id below it did */
    fsync_job *queue_head, *queue_tail;
    fsync_job *done_head, *done_tail;
} FsyncWorker;

static double
elapsed_s(const struct timespec *start, const struct timespec *end)
{
    return (double)(end->tv_sec - start->tv_sec) + (double)(end->tv_nsec - start->tv_nsec) / 1e9;
}

/* Append job to the list from *head to *tail (the caller holds the mutex). */
static void
append_job(fsync_job **head, fsync_job **tail, fsync_job *job)
{
    job->next = NULL;
    if (*tail == NULL) {
        *head = job;
    } else {
        (*tail)->next = job;
    }
    *tail = job;
}

static void *
worker_main(void *arg)
{
    FsyncWorker *self = (FsyncWorker *)arg;
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        while (self->queue_head == NULL && !self->stopping) {
            pthread_cond_wait(&self->queued, &self->mutex);
        }
        fsync_job *job = self->queue_head;
        if (job == NULL) {
            break; /* stopping, and every queued job is done */
        }
        self->queue_head = job->next;
        if (self->queue_head == NULL) {
            self->queue_tail = NULL;
        }
        pthread_mutex_unlock(&self->mutex);

        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        int error = 0;
        for (Py_ssize_t i = 0; i < job->count; i++) {
            if (error == 0 && fdatasync(job->fds[i]) != 0) {
                error = errno;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &end);
        for (Py_ssize_t i = 0; i < job->count; i++) {
            close(job->fds[i]);
        }
        job->error = error;
        job->seconds = elapsed_s(&start, &end);

        pthread_mutex_lock(&self->mutex);
        append_job(&self->done_head, &self->done_tail, job);
        self->finished_below = job->id + 1;
        pthread_cond_broadcast(&self->finished);
        pthread_mutex_unlock(&self->mutex);
        uint64_t one = 1;
        ssize_t written;
        do {
            written = write(self->event_fd, &one, sizeof one);
        } while (written < 0 && errno == EINTR);
        pthread_mutex_lock(&self->mutex);
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

static void
free_jobs(fsync_job *job, int close_fds)
{
    while (job != NULL) {
        fsync_job *next = job->next;
        if (close_fds) {
            for (Py_ssize_t i = 0; i < job->count; i++) {
                close(job->fds[i]);
            }
        }
        PyMem_RawFree(job);
        job = next;
    }
}

/* Stop the thread once the queued jobs are done, and join it (without the GIL). */
static void
stop_worker(FsyncWorker *self)
{
    if (!self->running) {
        return;
    }
    pthread_mutex_lock(&self->mutex);
    self->stopping = 1;
    pthread_cond_signal(&self->queued);
    pthread_mutex_unlock(&self->mutex);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->running = 0;
}

static PyObject *
FsyncWorker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "FsyncWorker() takes no arguments");
        return NULL;
    }
    FsyncWorker *self = (FsyncWorker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->event_fd = -1;
    pthread_mutex_init(&self->mutex, NULL);
    pthread_cond_init(&self->queued, NULL);
    pthread_cond_init(&self->finished, NULL);
    self->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    int error = pthread_create(&self->thread, NULL, worker_main, self);
    if (error != 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->running = 1;
    return (PyObject *)self;
}

static void
FsyncWorker_dealloc(FsyncWorker *self)
{
    stop_worker(self);
    free_jobs(self->queue_head, 1);
    free_jobs(self->done_head, 0);
    if (self->event_fd >= 0) {
        close(self->event_fd);
    }
    pthread_cond_destroy(&self->finished);
    pthread_cond_destroy(&self->queued);
    pthread_mutex_destroy(&self->mutex);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(fileno_doc,
"fileno() -> int\n\n"
"The eventfd that becomes readable when jobs finish (watch it with loop.add_reader).");

static PyObject *
FsyncWorker_fileno(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->event_fd);
}

PyDoc_STRVAR(submit_doc,
"submit(fds, /) -> int\n\n"
"Queue a job: fdatasync each descriptor of the sequence fds in order, then close them all\n"
"(the job owns them from here on, whatever happens). Returns the job's id.");

static PyObject *
FsyncWorker_submit(FsyncWorker *self, PyObject *fds_arg)
{
    PyObject *fds = PySequence_Fast(fds_arg, "submit() takes a sequence of descriptors");
    if (fds == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fds);
    fsync_job *job = PyMem_RawMalloc(sizeof(fsync_job) + (size_t)count * sizeof(int));
    if (job == NULL) {
        Py_DECREF(fds);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(fds, i));
        if (fd == -1 && PyErr_Occurred()) {
            PyMem_RawFree(job);
            Py_DECREF(fds);
            return NULL;
        }
        if (fd < 0 || fd > INT32_MAX) {
            PyMem_RawFree(job);
            Py_DECREF(fds);
            PyErr_Format(PyExc_ValueError, "not a descriptor: %ld", fd);
            return NULL;
        }
        job->fds[i] = (int)fd;
    }
    Py_DECREF(fds);
    job->count = count;
    job->error = 0;
    job->seconds = 0.0;
    pthread_mutex_lock(&self->mutex);
    if (self->stopping || !self->running) {
        pthread_mutex_unlock(&self->mutex);
        PyMem_RawFree(job);
        PyErr_SetString(PyExc_RuntimeError, "the fsync worker is closed");
        return NULL;
    }
    job->id = self->next_id++;
    append_job(&self->queue_head, &self->queue_tail, job);
    pthread_cond_signal(&self->queued);
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromUnsignedLongLong(job->id);
}

/* (id, errno, seconds) of a finished job. */
static PyObject *
job_tuple(const fsync_job *job)
{
    return Py_BuildValue("(Kid)", job->id, job->error, job->seconds);
}

PyDoc_STRVAR(completed_doc,
"completed() -> list[tuple[int, int, float]]\n\n"
"The jobs finished since the last call, as (id, errno or 0, seconds the fdatasyncs took),\n"
"in the order they finished; clears the eventfd.");

static PyObject *
FsyncWorker_completed(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t counter;
    while (read(self->event_fd, &counter, sizeof counter) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&self->mutex);
    fsync_job *done = self->done_head;
    self->done_head = self->done_tail = NULL;
    pthread_mutex_unlock(&self->mutex);
    PyObject *result = PyList_New(0);
    for (fsync_job *job = done; job != NULL && result != NULL; job = job->next) {
        PyObject *item = job_tuple(job);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(item);
    }
    free_jobs(done, 0);
    return result;
}

PyDoc_STRVAR(wait_doc,
"wait(id, /) -> tuple[int, int, float]\n\n"
"Block (without the GIL) until job id finished; its (id, errno, seconds). The job is\n"
"taken: completed() does not report it. LookupError if completed() already did.");

static PyObject *
FsyncWorker_wait(FsyncWorker *self, PyObject *id_arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(id_arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    pthread_mutex_lock(&self->mutex);
    if (id >= self->next_id) {
        pthread_mutex_unlock(&self->mutex);
        PyErr_Format(PyExc_ValueError, "no job %llu was submitted", id);
        return NULL;
    }
    pthread_mutex_unlock(&self->mutex);
    fsync_job *found = NULL;
    /* The mutex is taken and left without the GIL: a thread holding it never waits for
     * the GIL, so a caller of submit() (which holds the GIL) cannot deadlock with us. */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        fsync_job *previous = NULL;
        for (fsync_job *job = self->done_head; job != NULL; previous = job, job = job->next) {
            if (job->id == id) {
                found = job;
                /* Taken here: completed() will not report it again. */
                if (previous == NULL) {
                    self->done_head = job->next;
                } else {
                    previous->next = job->next;
                }
                if (self->done_tail == job) {
                    self->done_tail = previous;
                }
                break;
            }
        }
        /* Finished and not in the list: completed() reported it. Waiting on would be
         * waiting forever. */
        if (found != NULL || id < self->finished_below || !self->running) {
            break;
        }
        pthread_cond_wait(&self->finished, &self->mutex);
    }
    pthread_mutex_unlock(&self->mutex);
    Py_END_ALLOW_THREADS
    if (found == NULL) {
        /* Already reported by completed(): it finished. Its outcome went there. */
        PyErr_Format(PyExc_LookupError, "job %llu was already reported", id);
        return NULL;
    }
    PyObject *result = job_tuple(found);
    PyMem_RawFree(found);
    return result;
}

PyDoc_STRVAR(close_doc,
"close() -> None\n\n"
"Finish the queued jobs, then stop the thread. Idempotent.");

static PyObject *
FsyncWorker_close(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    stop_worker(self);
    Py_RETURN_NONE;
}

static PyMethodDef FsyncWorker_methods[] = {
    {"fileno", (PyCFunction)FsyncWorker_fileno, METH_NOARGS, fileno_doc},
    {"submit", (PyCFunction)FsyncWorker_submit, METH_O, submit_doc},
    {"completed", (PyCFunction)FsyncWorker_completed, METH_NOARGS, completed_doc},
    {"wait", (PyCFunction)FsyncWorker_wait, METH_O, wait_doc},
    {"close", (PyCFunction)FsyncWorker_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(FsyncWorker_doc,
"FsyncWorker()\n\n"
"A C thread that fdatasyncs and closes the descriptors of submitted jobs, in order, without\n"
"the GIL, and makes fileno() readable as jobs finish.");

static PyTypeObject FsyncWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replica._fsync_worker.FsyncWorker",
    .tp_basicsize = sizeof(FsyncWorker),
    .tp_dealloc = (destructor)FsyncWorker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = FsyncWorker_doc,
    .tp_methods = FsyncWorker_methods,
    .tp_new = FsyncWorker_new,
};

static struct PyModuleDef fsync_worker_module = {
    PyModuleDef_HEAD_INIT,
    "replica._fsync_worker",
    "fdatasync on a C thread that never takes the GIL, reported through an eventfd.",
    -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__fsync_worker(void)
{
    if (PyType_Ready(&FsyncWorkerType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fsync_worker_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&FsyncWorkerType);
    if (PyModule_AddObject(module, "FsyncWorker", (PyObject *)&FsyncWorkerType) < 0) {
        Py_DECREF(&FsyncWorkerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
