/* perfsuite's native NCCL timed loop: a batch of NCCL calls issued back to back by C between one
 * pair of CUDA events on the transport's stream, so a sample is the device's time for the batch
 * and no Python runs between the calls (perfsuite/transports/native_nccl.py loads it; built on
 * first use by perfsuite/launch/native/nccl.py).
 *
 * No link-time dependency on NCCL or CUDA: the library has no undefined symbol outside libc and
 * no DT_NEEDED entry but libc's. ``perfsuite_nccl_open`` takes the path of the libnccl this process
 * already has loaded (CuPy's, found in /proc/self/maps) and opens it with RTLD_NOLOAD, so it gets
 * that very instance, the one the communicator lives in, never a second copy; the CUDA driver
 * (libcuda.so.1, which every CUDA process has loaded under that name) likewise. Functions come
 * from dlsym. nccl.h (NVIDIA's wheel's) gives NCCL's types and prototypes, checked here against
 * the pointers. No CUDA header is needed: the builder puts a stand-in cuda_runtime.h (and empty
 * cuda_fp16.h, cuda_bf16.h) first on the include path, declaring the one CUDA type nccl.h's
 * prototypes name, cudaStream_t, as the runtime does (the wheels' runtime headers are incomplete:
 * cuda_runtime.h wants crt/host_config.h, which only the compiler's wheel has). The six driver
 * calls are declared below under the exported names whose ABI they have.
 *
 * Events are the driver's (cuEvent*): a CUevent is a cudaEvent_t and a CUstream a cudaStream_t, so
 * they are recorded on CuPy's stream directly, in the primary context CuPy's runtime made current.
 *
 * Interface (ABI 1):
 *   int   perfsuite_nccl_abi(void);
 *   void *perfsuite_nccl_open(const char *nccl_path, const char *cuda_path, char *why, size_t n);
 *   int   perfsuite_nccl_version(void *h);       NCCL's version code (ncclGetVersion)
 *   int   perfsuite_nccl_alltoall(void *h);      1: ncclAlltoAll, 0: grouped ncclSend/ncclRecv
 *   int   perfsuite_nccl_batch(void *h, void *comm, int collective, const void *send, void *recv,
 *                              size_t count, size_t peer_bytes, int datatype, int op, int root,
 *                              int nranks, void *stream, long calls, long copies, size_t stride,
 *                              long turn, float *ms);
 *         call i of the batch works on copy (turn + i) % copies of the buffers, `stride` bytes
 *         apart, as nccl-tests shifts its buffers each iteration "to avoid cache effects";
 *   const char *perfsuite_nccl_error(void *h);   the last failure, one line
 *   void  perfsuite_nccl_close(void *h);
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#define PERFSUITE_NCCL_ABI 2

/* The loop passes the type as perfsuite/transports/nccl.py's NCCL_TYPES names it, an integer: pin
 * the newest codes it sends against this nccl.h, so a header that numbered them otherwise fails the
 * build (and the transport times from Python, with the reason) instead of reducing the wrong type.
 * fp8 buffers are bytes to this loop; NCCL reads them as the enum says. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
_Static_assert(ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11,
               "nccl.h's type enum is not the one perfsuite/transports/nccl.py passes");
#endif

/* Collective codes: the index in perfsuite.transports.base.COLLECTIVES. */
enum { ALLREDUCE = 0, ALL_GATHER = 1, REDUCE_SCATTER = 2, ALLTOALL = 3, BROADCAST = 4, REDUCE = 5 };

/* perfsuite_nccl_batch's return codes. */
enum { OK = 0, NCCL_FAILED = 1, CUDA_FAILED = 2, BAD_ARGUMENT = 3 };

/* The CUDA driver calls, with the ABI of the symbol names looked up (cuda.h remaps some names to
 * later versions by macro; these are the exported symbols themselves, unchanged since CUDA 4). */
typedef int cu_result;
typedef struct CUevent_st *cu_event; /* CUevent, cudaEvent_t */
typedef cu_result (*cu_event_create_fn)(cu_event *event, unsigned int flags);
typedef cu_result (*cu_event_record_fn)(cu_event event, cudaStream_t stream);
typedef cu_result (*cu_event_synchronize_fn)(cu_event event);
typedef cu_result (*cu_event_elapsed_fn)(float *ms, cu_event start, cu_event end);
typedef cu_result (*cu_event_destroy_fn)(cu_event event);
typedef cu_result (*cu_stream_synchronize_fn)(cudaStream_t stream);
typedef cu_result (*cu_error_string_fn)(cu_result error, const char **text);

/* ncclAlltoAll (NCCL >= 2.28), declared here so that an older nccl.h builds the same loop. */
typedef ncclResult_t (*nccl_alltoall_fn)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                         ncclComm_t comm, cudaStream_t stream);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
_Static_assert(__builtin_types_compatible_p(nccl_alltoall_fn, __typeof__(&ncclAlltoAll)),
               "ncclAlltoAll's prototype is not the one declared here");
#endif

struct perfsuite_nccl {
    void *nccl, *cuda;
    int version;
    __typeof__(&ncclGetVersion) get_version;
    __typeof__(&ncclGetErrorString) error_string;
    __typeof__(&ncclAllReduce) allreduce;
    __typeof__(&ncclAllGather) all_gather;
    __typeof__(&ncclReduceScatter) reduce_scatter;
    __typeof__(&ncclBroadcast) broadcast;
    __typeof__(&ncclReduce) reduce;
    __typeof__(&ncclSend) send;
    __typeof__(&ncclRecv) recv;
    __typeof__(&ncclGroupStart) group_start;
    __typeof__(&ncclGroupEnd) group_end;
    nccl_alltoall_fn alltoall; /* NULL where the loaded NCCL predates it (< 2.28) */
    cu_event_create_fn event_create;
    cu_event_record_fn event_record;
    cu_event_synchronize_fn event_synchronize;
    cu_event_elapsed_fn event_elapsed;
    cu_event_destroy_fn event_destroy;
    cu_stream_synchronize_fn stream_synchronize;
    cu_error_string_fn cu_error_string; /* may be NULL */
    cu_event start, end;
    char error[512];
};

int perfsuite_nccl_abi(void) { return PERFSUITE_NCCL_ABI; }

static void say(char *buf, size_t n, const char *fmt, ...) {
    if (buf == NULL || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static void *lookup(void *lib, const char *name, const char *where, char *why, size_t n) {
    dlerror();
    void *f = dlsym(lib, name);
    if (f == NULL) say(why, n, "%s has no %s", where, name);
    return f;
}

void perfsuite_nccl_close(void *handle);

void *perfsuite_nccl_open(const char *nccl_path, const char *cuda_path, char *why, size_t n) {
    struct perfsuite_nccl *h = calloc(1, sizeof *h);
    if (h == NULL) {
        say(why, n, "out of memory");
        return NULL;
    }
    if (cuda_path == NULL || cuda_path[0] == '\0') cuda_path = "libcuda.so.1";
    h->nccl = dlopen(nccl_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h->nccl == NULL) {
        say(why, n, "%s is not loaded in this process (the loop uses the NCCL CuPy loaded, never "
            "a second copy)", nccl_path);
        goto fail;
    }
#define NCCL_FN(field, name) \
    if ((*(void **)&h->field = lookup(h->nccl, name, nccl_path, why, n)) == NULL) goto fail
    NCCL_FN(get_version, "ncclGetVersion");
    NCCL_FN(error_string, "ncclGetErrorString");
    NCCL_FN(allreduce, "ncclAllReduce");
    NCCL_FN(all_gather, "ncclAllGather");
    NCCL_FN(reduce_scatter, "ncclReduceScatter");
    NCCL_FN(broadcast, "ncclBroadcast");
    NCCL_FN(reduce, "ncclReduce");
    NCCL_FN(send, "ncclSend");
    NCCL_FN(recv, "ncclRecv");
    NCCL_FN(group_start, "ncclGroupStart");
    NCCL_FN(group_end, "ncclGroupEnd");
#undef NCCL_FN
    if (h->get_version(&h->version) != ncclSuccess) {
        say(why, n, "ncclGetVersion failed in %s", nccl_path);
        goto fail;
    }
    /* nccl-tests times alltoall as ncclAlltoAll where the NCCL it runs has it (>= 2.28). */
    if (h->version >= NCCL_VERSION(2, 28, 0)) *(void **)&h->alltoall = dlsym(h->nccl, "ncclAlltoAll");
    h->cuda = dlopen(cuda_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h->cuda == NULL) {
        say(why, n, "the CUDA driver (%s) is not loaded in this process", cuda_path);
        goto fail;
    }
#define CU_FN(field, name) \
    if ((*(void **)&h->field = lookup(h->cuda, name, cuda_path, why, n)) == NULL) goto fail
    CU_FN(event_create, "cuEventCreate");
    CU_FN(event_record, "cuEventRecord");
    CU_FN(event_synchronize, "cuEventSynchronize");
    /* the v1 symbol, else v2 (CUDA >= 12.8: the same signature, what cuda.h 13 calls by the name) */
    if ((*(void **)&h->event_elapsed = dlsym(h->cuda, "cuEventElapsedTime")) == NULL)
        CU_FN(event_elapsed, "cuEventElapsedTime_v2");
    CU_FN(event_destroy, "cuEventDestroy_v2");
    CU_FN(stream_synchronize, "cuStreamSynchronize");
#undef CU_FN
    *(void **)&h->cu_error_string = dlsym(h->cuda, "cuGetErrorString");
    cu_result rc = h->event_create(&h->start, 0);
    if (rc == 0) rc = h->event_create(&h->end, 0);
    if (rc != 0) {
        const char *text = NULL;
        if (h->cu_error_string == NULL || h->cu_error_string(rc, &text) != 0) text = NULL;
        say(why, n, "cuEventCreate failed (CUDA error %d%s%s); is a CUDA context current?", rc,
            text ? ": " : "", text ? text : "");
        goto fail;
    }
    return h;
fail:
    perfsuite_nccl_close(h);
    return NULL;
}

int perfsuite_nccl_version(void *handle) {
    return handle ? ((struct perfsuite_nccl *)handle)->version : 0;
}

int perfsuite_nccl_alltoall(void *handle) {
    return handle && ((struct perfsuite_nccl *)handle)->alltoall != NULL;
}

const char *perfsuite_nccl_error(void *handle) {
    return handle ? ((struct perfsuite_nccl *)handle)->error : "no handle";
}

static int nccl_failed(struct perfsuite_nccl *h, const char *call, ncclResult_t r) {
    say(h->error, sizeof h->error, "%s: %s (NCCL error %d; NCCL_DEBUG=WARN says more)", call,
        h->error_string(r), (int)r);
    return NCCL_FAILED;
}

static int cuda_failed(struct perfsuite_nccl *h, const char *call, cu_result r) {
    const char *text = NULL;
    if (h->cu_error_string == NULL || h->cu_error_string(r, &text) != 0) text = NULL;
    say(h->error, sizeof h->error, "%s: CUDA error %d%s%s", call, r, text ? ": " : "", text ? text : "");
    return CUDA_FAILED;
}

/* One call of the collective, exactly as nccl-tests' RunColl issues it. */
static ncclResult_t issue(struct perfsuite_nccl *h, ncclComm_t comm, int collective, const void *send,
                          void *recv, size_t count, size_t peer_bytes, ncclDataType_t type,
                          ncclRedOp_t op, int root, int nranks, cudaStream_t stream) {
    switch (collective) {
    case ALLREDUCE:
        return h->allreduce(send, recv, count, type, op, comm, stream);
    case ALL_GATHER:
        return h->all_gather(send, recv, count, type, comm, stream);
    case REDUCE_SCATTER:
        return h->reduce_scatter(send, recv, count, type, op, comm, stream);
    case BROADCAST:
        return h->broadcast(send, recv, count, type, root, comm, stream);
    case REDUCE:
        return h->reduce(send, recv, count, type, op, root, comm, stream);
    case ALLTOALL: {
        if (h->alltoall != NULL) return h->alltoall(send, recv, count, type, comm, stream);
        ncclResult_t r = h->group_start(), end;
        for (int p = 0; p < nranks && r == ncclSuccess; p++) {
            r = h->send((const char *)send + (size_t)p * peer_bytes, count, type, p, comm, stream);
            if (r == ncclSuccess) r = h->recv((char *)recv + (size_t)p * peer_bytes, count, type, p, comm, stream);
        }
        end = h->group_end(); /* always: a group left open would swallow the next call */
        return r != ncclSuccess ? r : end;
    }
    default:
        return ncclInvalidArgument;
    }
}

int perfsuite_nccl_batch(void *handle, void *comm, int collective, const void *send, void *recv,
                         size_t count, size_t peer_bytes, int datatype, int op, int root, int nranks,
                         void *stream, long calls, long copies, size_t stride, long turn, float *ms) {
    struct perfsuite_nccl *h = handle;
    if (h == NULL || comm == NULL || ms == NULL || calls < 0 || nranks < 1 || collective < ALLREDUCE ||
        collective > REDUCE || copies < 1 || turn < 0) {
        if (h != NULL) say(h->error, sizeof h->error, "bad argument to perfsuite_nccl_batch");
        return BAD_ARGUMENT;
    }
    cudaStream_t s = (cudaStream_t)stream;
    cu_result c;
    /* Nothing queued before may fall inside the events. */
    if ((c = h->stream_synchronize(s)) != 0) return cuda_failed(h, "cuStreamSynchronize", c);
    if ((c = h->event_record(h->start, s)) != 0) return cuda_failed(h, "cuEventRecord", c);
    for (long i = 0; i < calls; i++) {
        size_t shift = stride * (size_t)((turn + i) % copies);
        ncclResult_t r = issue(h, (ncclComm_t)comm, collective, (const char *)send + shift,
                               (char *)recv + shift, count, peer_bytes, (ncclDataType_t)datatype,
                               (ncclRedOp_t)op, root, nranks, s);
        if (r != ncclSuccess) return nccl_failed(h, "the NCCL call", r);
    }
    if ((c = h->event_record(h->end, s)) != 0) return cuda_failed(h, "cuEventRecord", c);
    if ((c = h->event_synchronize(h->end)) != 0) return cuda_failed(h, "cuEventSynchronize", c);
    if ((c = h->event_elapsed(ms, h->start, h->end)) != 0) return cuda_failed(h, "cuEventElapsedTime", c);
    return OK;
}

void perfsuite_nccl_close(void *handle) {
    struct perfsuite_nccl *h = handle;
    if (h == NULL) return;
    if (h->event_destroy != NULL) {
        if (h->start != NULL) h->event_destroy(h->start);
        if (h->end != NULL) h->event_destroy(h->end);
    }
    if (h->cuda != NULL) dlclose(h->cuda); /* drops the reference RTLD_NOLOAD took; unloads nothing */
    if (h->nccl != NULL) dlclose(h->nccl);
    free(h);
}
