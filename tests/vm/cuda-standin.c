/*
 * A stand-in libcuda.so.1 for testing `fabric-preflight pair --memory gpu` (and any other GPU-memory path)
 * on a machine without an NVIDIA GPU: the soft-RoCE VMs of tests/vm/rxe-vm.sh and the build machine's CLI
 * tests (tests/cli/pair.rs). It is a test fixture, never shipped, never loaded unless LD_LIBRARY_PATH points
 * at it.
 *
 *   cc -shared -fPIC -O2 -o libcuda.so.1 tests/vm/cuda-standin.c
 *   LD_LIBRARY_PATH=DIR fabric-preflight pair --memory gpu ...
 *
 * What it pretends:
 * - one device, ordinal 0, PCI bus id STANDIN_BUS_ID (a fixed id no real machine of ours has), driver 13.0;
 *   CUDA_STANDIN_DEVICES=0 makes it list none (a driver that sees no GPU);
 * - "device memory" is host memory: cuMemAlloc maps a memfd (MAP_SHARED), so ibv_reg_mr on the "device
 *   pointer" works on rxe exactly as it would with nvidia_peermem loaded (the peermem path);
 * - cuMemGetHandleForAddressRange answers CUDA_ERROR_NOT_SUPPORTED (as the proprietary kernel module does),
 *   unless CUDA_STANDIN_DMABUF=udmabuf: then it exports a real dma-buf of the allocation's memfd through
 *   /dev/udmabuf (UDMABUF_CREATE), so ibv_reg_dmabuf_mr is tried for real (the DMA-BUF path);
 * - copies are memcpy, streams and events are tokens, every event pair times 1 ms.
 * It defines every entry point src/dynlib/cuda.rs (REQUIRED_SYMBOLS, cuEventElapsedTime[_v2]) and
 * src/dynlib/cuda_dmabuf.rs resolve; a new one there needs a definition here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define STANDIN_BUS_ID "0000:5e:00.0"

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

typedef unsigned long long CUdeviceptr;

static int initialized;
static char context_token, stream_token, event_token;

/* Live allocations: pointer, length, and the memfd behind it (for the dma-buf export). */
#define MAX_ALLOCS 256
static struct {
    void *ptr;
    size_t len;
    int memfd;
} allocs[MAX_ALLOCS];

static size_t page_round(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return n == 0 ? page : (n + page - 1) / page * page;
}

int cuInit(unsigned int flags) {
    (void)flags;
    initialized = 1;
    return CUDA_SUCCESS;
}

int cuDriverGetVersion(int *version) {
    *version = 13000;
    return CUDA_SUCCESS;
}

int cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    const char *devices = getenv("CUDA_STANDIN_DEVICES");
    *count = devices && strcmp(devices, "0") == 0 ? 0 : 1;
    return CUDA_SUCCESS;
}

int cuDeviceGet(int *device, int ordinal) {
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

int cuDeviceGetName(char *name, int len, int device) {
    (void)device;
    if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "fabric-preflight CUDA stand-in", (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)attribute;
    (void)device;
    *value = 0;
    return CUDA_SUCCESS;
}

int cuDeviceGetPCIBusId(char *bus_id, int len, int device) {
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (len < (int)sizeof STANDIN_BUS_ID) return CUDA_ERROR_INVALID_VALUE;
    memcpy(bus_id, STANDIN_BUS_ID, sizeof STANDIN_BUS_ID);
    return CUDA_SUCCESS;
}

int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    (void)device;
    *bytes = (size_t)1 << 30;
    return CUDA_SUCCESS;
}

int cuDeviceCanAccessPeer(int *can, int device, int peer) {
    (void)device;
    (void)peer;
    *can = 0;
    return CUDA_SUCCESS;
}

int cuDevicePrimaryCtxRetain(void **ctx, int device) {
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = &context_token;
    return CUDA_SUCCESS;
}

int cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return CUDA_SUCCESS; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return CUDA_SUCCESS; }
int cuCtxSynchronize(void) { return CUDA_SUCCESS; }
int cuCtxEnablePeerAccess(void *ctx, unsigned int flags) { (void)ctx; (void)flags; return CUDA_ERROR_NOT_SUPPORTED; }

int cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    int slot = -1;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].ptr) {
            slot = i;
            break;
        }
    }
    if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = page_round(bytes);
    /* Sealable, so /dev/udmabuf accepts it (it requires F_SEAL_SHRINK). */
    int fd = memfd_create("cuda-standin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)len) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    allocs[slot].ptr = p;
    allocs[slot].len = len;
    allocs[slot].memfd = fd;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

int cuMemFree_v2(CUdeviceptr dptr) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && (CUdeviceptr)(uintptr_t)allocs[i].ptr == dptr) {
            munmap(allocs[i].ptr, allocs[i].len);
            close(allocs[i].memfd);
            allocs[i].ptr = NULL;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;
    *p = calloc(1, bytes ? bytes : 1);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

int cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }
int cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags) { (void)p; (void)bytes; (void)flags; return CUDA_SUCCESS; }
int cuMemHostUnregister(void *p) { (void)p; return CUDA_SUCCESS; }

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
    (void)stream;
    return cuMemcpyHtoD_v2(dst, src, bytes);
}

int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
    (void)stream;
    return cuMemcpyDtoH_v2(dst, src, bytes);
}

int cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t bytes, void *stream) {
    (void)dst_ctx;
    (void)src_ctx;
    (void)stream;
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

int cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t words) {
    unsigned int *p = (unsigned int *)(uintptr_t)dst;
    for (size_t i = 0; i < words; i++) p[i] = value;
    return CUDA_SUCCESS;
}

int cuStreamCreate(void **stream, unsigned int flags) { (void)flags; *stream = &stream_token; return CUDA_SUCCESS; }
int cuStreamSynchronize(void *stream) { (void)stream; return CUDA_SUCCESS; }
int cuStreamDestroy_v2(void *stream) { (void)stream; return CUDA_SUCCESS; }
int cuEventCreate(void **event, unsigned int flags) { (void)flags; *event = &event_token; return CUDA_SUCCESS; }
int cuEventRecord(void *event, void *stream) { (void)event; (void)stream; return CUDA_SUCCESS; }
int cuEventSynchronize(void *event) { (void)event; return CUDA_SUCCESS; }
int cuEventDestroy_v2(void *event) { (void)event; return CUDA_SUCCESS; }
int cuEventElapsedTime_v2(float *ms, void *start, void *end) { (void)start; (void)end; *ms = 1.0f; return CUDA_SUCCESS; }
int cuEventElapsedTime(float *ms, void *start, void *end) { return cuEventElapsedTime_v2(ms, start, end); }

/* CUDA_ERROR_NOT_SUPPORTED (the proprietary kernel module's answer) unless CUDA_STANDIN_DMABUF=udmabuf. */
int cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size, int type, unsigned long long flags) {
    (void)flags;
    const char *mode = getenv("CUDA_STANDIN_DMABUF");
    if (!mode || strcmp(mode, "udmabuf") != 0) return CUDA_ERROR_NOT_SUPPORTED;
    if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && (CUdeviceptr)(uintptr_t)allocs[i].ptr == dptr) {
            if (size > allocs[i].len) return CUDA_ERROR_INVALID_VALUE;
            int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
            if (dev < 0) return CUDA_ERROR_NOT_SUPPORTED;
            struct udmabuf_create create = {
                .memfd = (unsigned int)allocs[i].memfd,
                .flags = UDMABUF_FLAGS_CLOEXEC,
                .offset = 0,
                .size = allocs[i].len,
            };
            int fd = ioctl(dev, UDMABUF_CREATE, &create);
            close(dev);
            if (fd < 0) return CUDA_ERROR_NOT_SUPPORTED;
            *(int *)handle = fd;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

int cuGetErrorName(int error, const char **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}

int cuGetErrorString(int error, const char **text) {
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported (CUDA stand-in: set CUDA_STANDIN_DMABUF=udmabuf)"; break;
    default: *text = "CUDA stand-in error"; break;
    }
    return CUDA_SUCCESS;
}
