/*
 * nvml_load.h: one NVML loader, for the node agent's discovery
 * (src/node/discover.c) and Xid health and usage (src/node/health.c), and
 * the interposer's NVML views (src/shim).
 *
 * The library is opened once and every function either part calls is
 * resolved from one table (GF__NVML_FNS), so a symbol name is spelled in
 * one place.  No NVML header is needed: each caller declares the
 * signatures it calls, with its own types, and copies a resolved pointer
 * into a typed one with GF__NVML_GET (no cast between object and function
 * pointers).  A function the library lacks stays NULL; the caller decides
 * which it requires.  Plain C and libdl only: this is compiled into
 * libgpufrac-cuda.so, which must stay free of the node agent's
 * dependencies.
 */
#ifndef GPUFRAC_NVML_LOAD_H
#define GPUFRAC_NVML_LOAD_H
#include <string.h>

/* X(id, symbol): every NVML function the node agent or the interposer
 * calls. */
#define GF__NVML_FNS(X)                                                        \
  X(INIT, "nvmlInit_v2")                                                       \
  X(SHUTDOWN, "nvmlShutdown")                                                  \
  X(ERROR_STRING, "nvmlErrorString")                                           \
  X(COUNT, "nvmlDeviceGetCount_v2")                                            \
  X(BY_INDEX, "nvmlDeviceGetHandleByIndex_v2")                                 \
  X(BY_UUID, "nvmlDeviceGetHandleByUUID")                                      \
  X(UUID, "nvmlDeviceGetUUID")                                                 \
  X(INDEX, "nvmlDeviceGetIndex")                                               \
  X(NAME, "nvmlDeviceGetName")                                                 \
  X(MEMORY, "nvmlDeviceGetMemoryInfo")                                         \
  X(MEMORY_V2, "nvmlDeviceGetMemoryInfo_v2")                                   \
  X(CC, "nvmlDeviceGetCudaComputeCapability")                                  \
  X(PCI, "nvmlDeviceGetPciInfo_v3")                                            \
  X(MINOR, "nvmlDeviceGetMinorNumber")                                         \
  X(MIG_MODE, "nvmlDeviceGetMigMode")                                          \
  X(NUMA, "nvmlDeviceGetNumaNodeId")                                           \
  X(DRIVER, "nvmlSystemGetDriverVersion")                                      \
  X(CUDA, "nvmlSystemGetCudaDriverVersion_v2")                                 \
  X(MIG_COUNT, "nvmlDeviceGetMaxMigDeviceCount")                               \
  X(MIG_HANDLE, "nvmlDeviceGetMigDeviceHandleByIndex")                         \
  X(GI_ID, "nvmlDeviceGetGpuInstanceId")                                       \
  X(CI_ID, "nvmlDeviceGetComputeInstanceId")                                   \
  X(ATTRIBUTES, "nvmlDeviceGetAttributes_v2")                                  \
  X(LINK_STATE, "nvmlDeviceGetNvLinkState")                                    \
  X(LINK_PCI, "nvmlDeviceGetNvLinkRemotePciInfo_v2")                           \
  X(LINK_TYPE, "nvmlDeviceGetNvLinkRemoteDeviceType")                          \
  X(EVENT_CREATE, "nvmlEventSetCreate")                                        \
  X(EVENT_REGISTER, "nvmlDeviceRegisterEvents")                                \
  X(EVENT_FREE, "nvmlEventSetFree")                                            \
  X(EVENT_WAIT, "nvmlEventSetWait_v2")                                         \
  X(UTILIZATION, "nvmlDeviceGetUtilizationRates")                              \
  X(PROC_UTILIZATION, "nvmlDeviceGetProcessUtilization")                       \
  X(BRAND, "nvmlDeviceGetBrand")

#define GF__NVML_ENUM(id, sym) GF__NVML_##id,
typedef enum gf__nvml_fn {
  GF__NVML_FNS(GF__NVML_ENUM) GF__NVML_NFNS
} gf__nvml_fn;
#undef GF__NVML_ENUM

/* An open NVML: the handle, the lookup used (the interposer passes the C
 * library's dlsym, since its own exported dlsym stands in front of it) and
 * the table's functions. */
typedef struct gf__nvml {
  void *h;
  void *(*sym)(void *, const char *);
  void *fn[GF__NVML_NFNS];
} gf__nvml;

/* Opens path (NULL: libnvidia-ml.so.1) with RTLD_NOW | RTLD_LOCAL and
 * resolves every function of the table through sym (NULL: dlsym).  0 on
 * success; -1 when the library cannot be opened, with *why (when why is not
 * NULL) dlerror()'s text or "unknown reason", and n zeroed. */
int gf__nvml_open(gf__nvml *n, const char *path,
                  void *(*sym)(void *, const char *), const char **why);

/* The symbol of table entry f. */
const char *gf__nvml_name(gf__nvml_fn f);

/* The function called name: the table's when it has one, else looked up in
 * the open library; NULL when it is not there or n is not open. */
void *gf__nvml_find(const gf__nvml *n, const char *name);

/* Closes the library (nvmlShutdown is the caller's). */
void gf__nvml_close(gf__nvml *n);

/* Copies table entry f into the function pointer ptr. */
#define GF__NVML_GET(n, f, ptr)                                                \
  memcpy(&(ptr), &(n)->fn[f],                                                  \
         sizeof(ptr) < sizeof(void *) ? sizeof(ptr) : sizeof(void *))

#endif
