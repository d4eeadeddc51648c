/*
 * pass_through.h: every driver function a CUDA runtime asks cuGetProcAddress
 * for (tests/shim/data: NVIDIA's libcudart 12.9.79 and 13.5.37, measured)
 * or that cuda.h maps to a per-thread-default-stream variant, which the
 * interposer does NOT hook, each with the reason (one line, by kind).  The
 * hooked ones are GF_SHIM_HOOKS in cuda_api.h, every variant of each.
 *
 * test_shim_hooks (tests/shim/check_hooks.c) reads those data files: a
 * name listed here must reach the real driver's function unchanged, any
 * other must reach the interposer's wrapper, through cuGetProcAddress (v1
 * and _v2, with the version and flags the runtime asked), through dlsym on
 * the driver's handle and as a linked symbol.  A name that is neither
 * fails it: a new runtime's new name, or a hook added without taking its
 * name out of here.  Nothing in the library reads this table.
 *
 *   X(base name as a runtime asks for it, reason)
 */
#ifndef GPUFRAC_SHIM_PASS_THROUGH_H
#define GPUFRAC_SHIM_PASS_THROUGH_H

#define GF_PASS_QUERY "a query: reads state; no device memory, no kernel"
#define GF_PASS_SETTING "a setting or attribute; no device memory, no kernel"
#define GF_PASS_CURRENT "sets the current context; nothing to charge"
#define GF_PASS_ORDER                                                          \
  "stream, event or semaphore ordering; no device memory, no kernel"
#define GF_PASS_COPY                                                           \
  "copies or sets bytes of memory already charged; the bucket counts "         \
  "kernel blocks only (docs/shim.md, Compute)"
#define GF_PASS_HOSTFN "queues a host function: no kernel, no device memory"
#define GF_PASS_CAPTURE                                                        \
  "stream capture builds a graph: its work is counted at cuGraphLaunch"
#define GF_PASS_GRAPH                                                          \
  "builds, edits or inspects a graph: counted at cuGraphLaunch"
#define GF_PASS_GRAPHINST                                                      \
  "instantiates or uploads a graph: graph memory is not accounted (a gap, "    \
  "docs/shim.md)"
#define GF_PASS_GRAPHMEM                                                       \
  "graph memory (alloc and free nodes, its trim and attributes): not "         \
  "accounted (a gap, docs/shim.md)"
#define GF_PASS_MODULE                                                         \
  "loads or looks up code: its memory is in the context's charge"
#define GF_PASS_CTXLIMIT                                                       \
  "a larger malloc heap or stack is device memory beyond the context's "       \
  "charge, not charged (a gap, docs/shim.md)"
#define GF_PASS_DETACH                                                         \
  "deprecated detach: the context's charge stays to exit (over, never "        \
  "under)"
#define GF_PASS_HOST "host memory (pinned or registered): not device memory"
#define GF_PASS_MANAGED                                                        \
  "moves or advises managed memory, charged in full at cuMemAllocManaged"
#define GF_PASS_SPARSE                                                         \
  "maps sparse array memory charged when the array was created"
#define GF_PASS_TEXOBJ "a texture or surface object over memory already charged"
#define GF_PASS_POOLCFG                                                        \
  "pool set-up or attribute: a pool is charged by what it reserves, at "       \
  "its allocations (shim_pool.c)"
#define GF_PASS_POOLIPC                                                        \
  "shares a pool allocation across processes: the exporter's pool pays"
#define GF_PASS_IPC                                                            \
  "CUDA IPC: the allocating process is charged, the opener is not "            \
  "(tested: ipc-charged-once)"
#define GF_PASS_EXTERNAL                                                       \
  "imported external memory: the exporter pays (docs/shim.md)"
#define GF_PASS_INTEROP                                                        \
  "graphics interop (GL, EGL, VDPAU): memory the graphics API allocated"
#define GF_PASS_INTEROP_CTX                                                    \
  "a graphics-interop context: not charged context_overhead (a gap, "          \
  "docs/shim.md)"
#define GF_PASS_GREEN                                                          \
  "green contexts split a charged device's SMs; their allocations and "        \
  "launches go through the hooked calls"
#define GF_PASS_INFO "versions, error strings, logs, profiler control"
#define GF_PASS_EXPORT_TABLE                                                   \
  "the runtime's private driver interface, undocumented: calls through it "    \
  "are not seen (a gap, docs/shim.md)"

#define GF_SHIM_PASS(X)                                                        \
  X(cuArray3DGetDescriptor, GF_PASS_QUERY)                                     \
  X(cuArrayGetDescriptor, GF_PASS_QUERY)                                       \
  X(cuArrayGetMemoryRequirements, GF_PASS_QUERY)                               \
  X(cuArrayGetPlane, GF_PASS_QUERY)                                            \
  X(cuArrayGetSparseProperties, GF_PASS_QUERY)                                 \
  X(cuCtxDetach, GF_PASS_DETACH)                                               \
  X(cuCtxDisablePeerAccess, GF_PASS_SETTING)                                   \
  X(cuCtxEnablePeerAccess, GF_PASS_SETTING)                                    \
  X(cuCtxFromGreenCtx, GF_PASS_GREEN)                                          \
  X(cuCtxGetApiVersion, GF_PASS_QUERY)                                         \
  X(cuCtxGetCacheConfig, GF_PASS_QUERY)                                        \
  X(cuCtxGetCurrent, GF_PASS_QUERY)                                            \
  X(cuCtxGetDevResource, GF_PASS_GREEN)                                        \
  X(cuCtxGetDevice, GF_PASS_QUERY)                                             \
  X(cuCtxGetFlags, GF_PASS_QUERY)                                              \
  X(cuCtxGetId, GF_PASS_QUERY)                                                 \
  X(cuCtxGetLimit, GF_PASS_QUERY)                                              \
  X(cuCtxGetSharedMemConfig, GF_PASS_QUERY)                                    \
  X(cuCtxGetStreamPriorityRange, GF_PASS_QUERY)                                \
  X(cuCtxPopCurrent, GF_PASS_CURRENT)                                          \
  X(cuCtxPushCurrent, GF_PASS_CURRENT)                                         \
  X(cuCtxRecordEvent, GF_PASS_ORDER)                                           \
  X(cuCtxResetPersistingL2Cache, GF_PASS_SETTING)                              \
  X(cuCtxSetCacheConfig, GF_PASS_SETTING)                                      \
  X(cuCtxSetCurrent, GF_PASS_CURRENT)                                          \
  X(cuCtxSetLimit, GF_PASS_CTXLIMIT)                                           \
  X(cuCtxSetSharedMemConfig, GF_PASS_SETTING)                                  \
  X(cuCtxSynchronize, GF_PASS_ORDER)                                           \
  X(cuCtxWaitEvent, GF_PASS_ORDER)                                             \
  X(cuDestroyExternalMemory, GF_PASS_EXTERNAL)                                 \
  X(cuDestroyExternalSemaphore, GF_PASS_ORDER)                                 \
  X(cuDevResourceGenerateDesc, GF_PASS_GREEN)                                  \
  X(cuDevSmResourceSplitByCount, GF_PASS_GREEN)                                \
  X(cuDeviceCanAccessPeer, GF_PASS_QUERY)                                      \
  X(cuDeviceGet, GF_PASS_QUERY)                                                \
  X(cuDeviceGetAttribute, GF_PASS_QUERY)                                       \
  X(cuDeviceGetByPCIBusId, GF_PASS_QUERY)                                      \
  X(cuDeviceGetCount, GF_PASS_QUERY)                                           \
  X(cuDeviceGetDefaultMemPool, GF_PASS_POOLCFG)                                \
  X(cuDeviceGetDevResource, GF_PASS_GREEN)                                     \
  X(cuDeviceGetGraphMemAttribute, GF_PASS_GRAPHMEM)                            \
  X(cuDeviceGetHostAtomicCapabilities, GF_PASS_QUERY)                          \
  X(cuDeviceGetMemPool, GF_PASS_POOLCFG)                                       \
  X(cuDeviceGetName, GF_PASS_QUERY)                                            \
  X(cuDeviceGetNvSciSyncAttributes, GF_PASS_QUERY)                             \
  X(cuDeviceGetP2PAtomicCapabilities, GF_PASS_QUERY)                           \
  X(cuDeviceGetP2PAttribute, GF_PASS_QUERY)                                    \
  X(cuDeviceGetPCIBusId, GF_PASS_QUERY)                                        \
  X(cuDeviceGetTexture1DLinearMaxWidth, GF_PASS_QUERY)                         \
  X(cuDeviceGetUuid, GF_PASS_QUERY)                                            \
  X(cuDeviceGraphMemTrim, GF_PASS_GRAPHMEM)                                    \
  X(cuDevicePrimaryCtxGetState, GF_PASS_QUERY)                                 \
  X(cuDevicePrimaryCtxSetFlags, GF_PASS_SETTING)                               \
  X(cuDeviceRegisterAsyncNotification, GF_PASS_SETTING)                        \
  X(cuDeviceSetGraphMemAttribute, GF_PASS_GRAPHMEM)                            \
  X(cuDeviceSetMemPool, GF_PASS_POOLCFG)                                       \
  X(cuDeviceUnregisterAsyncNotification, GF_PASS_SETTING)                      \
  X(cuDriverGetVersion, GF_PASS_INFO)                                          \
  X(cuEGLStreamConsumerAcquireFrame, GF_PASS_INTEROP)                          \
  X(cuEGLStreamConsumerConnect, GF_PASS_INTEROP)                               \
  X(cuEGLStreamConsumerConnectWithFlags, GF_PASS_INTEROP)                      \
  X(cuEGLStreamConsumerDisconnect, GF_PASS_INTEROP)                            \
  X(cuEGLStreamConsumerReleaseFrame, GF_PASS_INTEROP)                          \
  X(cuEGLStreamProducerConnect, GF_PASS_INTEROP)                               \
  X(cuEGLStreamProducerDisconnect, GF_PASS_INTEROP)                            \
  X(cuEGLStreamProducerPresentFrame, GF_PASS_INTEROP)                          \
  X(cuEGLStreamProducerReturnFrame, GF_PASS_INTEROP)                           \
  X(cuEventCreate, GF_PASS_ORDER)                                              \
  X(cuEventDestroy, GF_PASS_ORDER)                                             \
  X(cuEventElapsedTime, GF_PASS_ORDER)                                         \
  X(cuEventQuery, GF_PASS_ORDER)                                               \
  X(cuEventRecord, GF_PASS_ORDER)                                              \
  X(cuEventRecordWithFlags, GF_PASS_ORDER)                                     \
  X(cuEventSynchronize, GF_PASS_ORDER)                                         \
  X(cuExternalMemoryGetMappedBuffer, GF_PASS_EXTERNAL)                         \
  X(cuExternalMemoryGetMappedMipmappedArray, GF_PASS_EXTERNAL)                 \
  X(cuFabricCpyBatchAsync, GF_PASS_COPY)                                       \
  X(cuFlushGPUDirectRDMAWrites, GF_PASS_ORDER)                                 \
  X(cuFuncGetAttribute, GF_PASS_MODULE)                                        \
  X(cuFuncGetName, GF_PASS_MODULE)                                             \
  X(cuFuncGetParamInfo, GF_PASS_MODULE)                                        \
  X(cuFuncSetAttribute, GF_PASS_MODULE)                                        \
  X(cuFuncSetCacheConfig, GF_PASS_MODULE)                                      \
  X(cuFuncSetSharedMemConfig, GF_PASS_MODULE)                                  \
  X(cuGLCtxCreate, GF_PASS_INTEROP_CTX)                                        \
  X(cuGLGetDevices, GF_PASS_QUERY)                                             \
  X(cuGLInit, GF_PASS_INTEROP)                                                 \
  X(cuGLMapBufferObject, GF_PASS_INTEROP)                                      \
  X(cuGLMapBufferObjectAsync, GF_PASS_INTEROP)                                 \
  X(cuGLRegisterBufferObject, GF_PASS_INTEROP)                                 \
  X(cuGLSetBufferObjectMapFlags, GF_PASS_INTEROP)                              \
  X(cuGLUnmapBufferObject, GF_PASS_INTEROP)                                    \
  X(cuGLUnmapBufferObjectAsync, GF_PASS_INTEROP)                               \
  X(cuGLUnregisterBufferObject, GF_PASS_INTEROP)                               \
  X(cuGetErrorName, GF_PASS_INFO)                                              \
  X(cuGetErrorString, GF_PASS_INFO)                                            \
  X(cuGetExportTable, GF_PASS_EXPORT_TABLE)                                    \
  X(cuGraphAddChildGraphNode, GF_PASS_GRAPH)                                   \
  X(cuGraphAddDependencies, GF_PASS_GRAPH)                                     \
  X(cuGraphAddEmptyNode, GF_PASS_GRAPH)                                        \
  X(cuGraphAddEventRecordNode, GF_PASS_GRAPH)                                  \
  X(cuGraphAddEventWaitNode, GF_PASS_GRAPH)                                    \
  X(cuGraphAddExternalSemaphoresSignalNode, GF_PASS_GRAPH)                     \
  X(cuGraphAddExternalSemaphoresWaitNode, GF_PASS_GRAPH)                       \
  X(cuGraphAddHostNode, GF_PASS_GRAPH)                                         \
  X(cuGraphAddKernelNode, GF_PASS_GRAPH)                                       \
  X(cuGraphAddMemAllocNode, GF_PASS_GRAPHMEM)                                  \
  X(cuGraphAddMemFreeNode, GF_PASS_GRAPHMEM)                                   \
  X(cuGraphAddMemcpyNode, GF_PASS_GRAPH)                                       \
  X(cuGraphAddMemsetNode, GF_PASS_GRAPH)                                       \
  X(cuGraphAddNode, GF_PASS_GRAPH)                                             \
  X(cuGraphChildGraphNodeGetGraph, GF_PASS_GRAPH)                              \
  X(cuGraphClone, GF_PASS_GRAPH)                                               \
  X(cuGraphConditionalHandleCreate, GF_PASS_GRAPH)                             \
  X(cuGraphCreate, GF_PASS_GRAPH)                                              \
  X(cuGraphDebugDotPrint, GF_PASS_GRAPH)                                       \
  X(cuGraphDestroy, GF_PASS_GRAPH)                                             \
  X(cuGraphDestroyNode, GF_PASS_GRAPH)                                         \
  X(cuGraphEventRecordNodeGetEvent, GF_PASS_GRAPH)                             \
  X(cuGraphEventRecordNodeSetEvent, GF_PASS_GRAPH)                             \
  X(cuGraphEventWaitNodeGetEvent, GF_PASS_GRAPH)                               \
  X(cuGraphEventWaitNodeSetEvent, GF_PASS_GRAPH)                               \
  X(cuGraphExecChildGraphNodeSetParams, GF_PASS_GRAPH)                         \
  X(cuGraphExecDestroy, GF_PASS_GRAPH)                                         \
  X(cuGraphExecEventRecordNodeSetEvent, GF_PASS_GRAPH)                         \
  X(cuGraphExecEventWaitNodeSetEvent, GF_PASS_GRAPH)                           \
  X(cuGraphExecExternalSemaphoresSignalNodeSetParams, GF_PASS_GRAPH)           \
  X(cuGraphExecExternalSemaphoresWaitNodeSetParams, GF_PASS_GRAPH)             \
  X(cuGraphExecGetFlags, GF_PASS_GRAPH)                                        \
  X(cuGraphExecHostNodeSetParams, GF_PASS_GRAPH)                               \
  X(cuGraphExecKernelNodeSetParams, GF_PASS_GRAPH)                             \
  X(cuGraphExecMemcpyNodeSetParams, GF_PASS_GRAPH)                             \
  X(cuGraphExecMemsetNodeSetParams, GF_PASS_GRAPH)                             \
  X(cuGraphExecNodeSetParams, GF_PASS_GRAPH)                                   \
  X(cuGraphExecUpdate, GF_PASS_GRAPH)                                          \
  X(cuGraphExternalSemaphoresSignalNodeGetParams, GF_PASS_GRAPH)               \
  X(cuGraphExternalSemaphoresSignalNodeSetParams, GF_PASS_GRAPH)               \
  X(cuGraphExternalSemaphoresWaitNodeGetParams, GF_PASS_GRAPH)                 \
  X(cuGraphExternalSemaphoresWaitNodeSetParams, GF_PASS_GRAPH)                 \
  X(cuGraphGetEdges, GF_PASS_GRAPH)                                            \
  X(cuGraphGetNodes, GF_PASS_GRAPH)                                            \
  X(cuGraphGetRootNodes, GF_PASS_GRAPH)                                        \
  X(cuGraphHostNodeGetParams, GF_PASS_GRAPH)                                   \
  X(cuGraphHostNodeSetParams, GF_PASS_GRAPH)                                   \
  X(cuGraphInstantiate, GF_PASS_GRAPHINST)                                     \
  X(cuGraphInstantiateWithFlags, GF_PASS_GRAPHINST)                            \
  X(cuGraphInstantiateWithParams, GF_PASS_GRAPHINST)                           \
  X(cuGraphKernelNodeCopyAttributes, GF_PASS_GRAPH)                            \
  X(cuGraphKernelNodeGetAttribute, GF_PASS_GRAPH)                              \
  X(cuGraphKernelNodeGetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphKernelNodeSetAttribute, GF_PASS_GRAPH)                              \
  X(cuGraphKernelNodeSetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphMemAllocNodeGetParams, GF_PASS_GRAPHMEM)                            \
  X(cuGraphMemFreeNodeGetParams, GF_PASS_GRAPHMEM)                             \
  X(cuGraphMemcpyNodeGetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphMemcpyNodeSetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphMemsetNodeGetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphMemsetNodeSetParams, GF_PASS_GRAPH)                                 \
  X(cuGraphNodeFindInClone, GF_PASS_GRAPH)                                     \
  X(cuGraphNodeGetDependencies, GF_PASS_GRAPH)                                 \
  X(cuGraphNodeGetDependentNodes, GF_PASS_GRAPH)                               \
  X(cuGraphNodeGetEnabled, GF_PASS_GRAPH)                                      \
  X(cuGraphNodeGetType, GF_PASS_GRAPH)                                         \
  X(cuGraphNodeSetEnabled, GF_PASS_GRAPH)                                      \
  X(cuGraphNodeSetParams, GF_PASS_GRAPH)                                       \
  X(cuGraphReleaseUserObject, GF_PASS_GRAPH)                                   \
  X(cuGraphRemoveDependencies, GF_PASS_GRAPH)                                  \
  X(cuGraphRetainUserObject, GF_PASS_GRAPH)                                    \
  X(cuGraphUpload, GF_PASS_GRAPHINST)                                          \
  X(cuGraphicsEGLRegisterImage, GF_PASS_INTEROP)                               \
  X(cuGraphicsGLRegisterBuffer, GF_PASS_INTEROP)                               \
  X(cuGraphicsGLRegisterImage, GF_PASS_INTEROP)                                \
  X(cuGraphicsMapResources, GF_PASS_INTEROP)                                   \
  X(cuGraphicsResourceGetMappedEglFrame, GF_PASS_INTEROP)                      \
  X(cuGraphicsResourceGetMappedMipmappedArray, GF_PASS_INTEROP)                \
  X(cuGraphicsResourceGetMappedPointer, GF_PASS_INTEROP)                       \
  X(cuGraphicsResourceSetMapFlags, GF_PASS_INTEROP)                            \
  X(cuGraphicsSubResourceGetMappedArray, GF_PASS_INTEROP)                      \
  X(cuGraphicsUnmapResources, GF_PASS_INTEROP)                                 \
  X(cuGraphicsUnregisterResource, GF_PASS_INTEROP)                             \
  X(cuGraphicsVDPAURegisterOutputSurface, GF_PASS_INTEROP)                     \
  X(cuGraphicsVDPAURegisterVideoSurface, GF_PASS_INTEROP)                      \
  X(cuGreenCtxCreate, GF_PASS_GREEN)                                           \
  X(cuGreenCtxDestroy, GF_PASS_GREEN)                                          \
  X(cuGreenCtxGetDevResource, GF_PASS_GREEN)                                   \
  X(cuGreenCtxGetId, GF_PASS_GREEN)                                            \
  X(cuGreenCtxRecordEvent, GF_PASS_GREEN)                                      \
  X(cuGreenCtxStreamCreate, GF_PASS_GREEN)                                     \
  X(cuGreenCtxWaitEvent, GF_PASS_GREEN)                                        \
  X(cuImportExternalMemory, GF_PASS_EXTERNAL)                                  \
  X(cuImportExternalSemaphore, GF_PASS_ORDER)                                  \
  X(cuIpcCloseMemHandle, GF_PASS_IPC)                                          \
  X(cuIpcGetEventHandle, GF_PASS_ORDER)                                        \
  X(cuIpcGetMemHandle, GF_PASS_IPC)                                            \
  X(cuIpcOpenEventHandle, GF_PASS_ORDER)                                       \
  X(cuIpcOpenMemHandle, GF_PASS_IPC)                                           \
  X(cuKernelGetAttribute, GF_PASS_MODULE)                                      \
  X(cuKernelGetFunction, GF_PASS_MODULE)                                       \
  X(cuKernelGetName, GF_PASS_MODULE)                                           \
  X(cuKernelGetParamInfo, GF_PASS_MODULE)                                      \
  X(cuKernelSetAttribute, GF_PASS_MODULE)                                      \
  X(cuKernelSetCacheConfig, GF_PASS_MODULE)                                    \
  X(cuLaunchHostFunc, GF_PASS_HOSTFN)                                          \
  X(cuLaunchHostFunc_v2, GF_PASS_HOSTFN)                                       \
  X(cuLibraryEnumerateKernels, GF_PASS_MODULE)                                 \
  X(cuLibraryGetGlobal, GF_PASS_MODULE)                                        \
  X(cuLibraryGetKernel, GF_PASS_MODULE)                                        \
  X(cuLibraryGetKernelCount, GF_PASS_MODULE)                                   \
  X(cuLibraryGetManaged, GF_PASS_MODULE)                                       \
  X(cuLibraryGetModule, GF_PASS_MODULE)                                        \
  X(cuLibraryGetUnifiedFunction, GF_PASS_MODULE)                               \
  X(cuLibraryLoadData, GF_PASS_MODULE)                                         \
  X(cuLibraryLoadFromFile, GF_PASS_MODULE)                                     \
  X(cuLibraryUnload, GF_PASS_MODULE)                                           \
  X(cuLinkAddData, GF_PASS_MODULE)                                             \
  X(cuLinkAddFile, GF_PASS_MODULE)                                             \
  X(cuLinkComplete, GF_PASS_MODULE)                                            \
  X(cuLinkCreate, GF_PASS_MODULE)                                              \
  X(cuLinkDestroy, GF_PASS_MODULE)                                             \
  X(cuLogsCurrent, GF_PASS_INFO)                                               \
  X(cuLogsDumpToFile, GF_PASS_INFO)                                            \
  X(cuLogsDumpToMemory, GF_PASS_INFO)                                          \
  X(cuLogsRegisterCallback, GF_PASS_INFO)                                      \
  X(cuLogsUnregisterCallback, GF_PASS_INFO)                                    \
  X(cuMemAdvise, GF_PASS_MANAGED)                                              \
  X(cuMemBatchDecompressAsync, GF_PASS_COPY)                                   \
  X(cuMemDiscardAndPrefetchBatchAsync, GF_PASS_MANAGED)                        \
  X(cuMemDiscardBatchAsync, GF_PASS_MANAGED)                                   \
  X(cuMemFreeHost, GF_PASS_HOST)                                               \
  X(cuMemGetAddressRange, GF_PASS_QUERY)                                       \
  X(cuMemGetDefaultMemPool, GF_PASS_POOLCFG)                                   \
  X(cuMemGetMemPool, GF_PASS_POOLCFG)                                          \
  X(cuMemHostAlloc, GF_PASS_HOST)                                              \
  X(cuMemHostGetDevicePointer, GF_PASS_HOST)                                   \
  X(cuMemHostGetFlags, GF_PASS_HOST)                                           \
  X(cuMemHostRegister, GF_PASS_HOST)                                           \
  X(cuMemHostUnregister, GF_PASS_HOST)                                         \
  X(cuMemMapArrayAsync, GF_PASS_SPARSE)                                        \
  X(cuMemPoolCreate, GF_PASS_POOLCFG)                                          \
  X(cuMemPoolExportPointer, GF_PASS_POOLIPC)                                   \
  X(cuMemPoolExportToShareableHandle, GF_PASS_POOLIPC)                         \
  X(cuMemPoolGetAccess, GF_PASS_POOLCFG)                                       \
  X(cuMemPoolGetAttribute, GF_PASS_POOLCFG)                                    \
  X(cuMemPoolImportFromShareableHandle, GF_PASS_POOLIPC)                       \
  X(cuMemPoolImportPointer, GF_PASS_POOLIPC)                                   \
  X(cuMemPoolSetAccess, GF_PASS_POOLCFG)                                       \
  X(cuMemPoolSetAttribute, GF_PASS_POOLCFG)                                    \
  X(cuMemPrefetchAsync, GF_PASS_MANAGED)                                       \
  X(cuMemPrefetchBatchAsync, GF_PASS_MANAGED)                                  \
  X(cuMemRangeGetAttribute, GF_PASS_QUERY)                                     \
  X(cuMemRangeGetAttributes, GF_PASS_QUERY)                                    \
  X(cuMemSetMemPool, GF_PASS_POOLCFG)                                          \
  X(cuMemcpy, GF_PASS_COPY)                                                    \
  X(cuMemcpy2D, GF_PASS_COPY)                                                  \
  X(cuMemcpy2DAsync, GF_PASS_COPY)                                             \
  X(cuMemcpy2DUnaligned, GF_PASS_COPY)                                         \
  X(cuMemcpy3D, GF_PASS_COPY)                                                  \
  X(cuMemcpy3DAsync, GF_PASS_COPY)                                             \
  X(cuMemcpy3DBatchAsync, GF_PASS_COPY)                                        \
  X(cuMemcpy3DPeer, GF_PASS_COPY)                                              \
  X(cuMemcpy3DPeerAsync, GF_PASS_COPY)                                         \
  X(cuMemcpy3DWithAttributesAsync, GF_PASS_COPY)                               \
  X(cuMemcpyAsync, GF_PASS_COPY)                                               \
  X(cuMemcpyAtoA, GF_PASS_COPY)                                                \
  X(cuMemcpyAtoD, GF_PASS_COPY)                                                \
  X(cuMemcpyAtoH, GF_PASS_COPY)                                                \
  X(cuMemcpyAtoHAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyBatchAsync, GF_PASS_COPY)                                          \
  X(cuMemcpyDtoA, GF_PASS_COPY)                                                \
  X(cuMemcpyDtoD, GF_PASS_COPY)                                                \
  X(cuMemcpyDtoDAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyDtoH, GF_PASS_COPY)                                                \
  X(cuMemcpyDtoHAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyHtoA, GF_PASS_COPY)                                                \
  X(cuMemcpyHtoAAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyHtoD, GF_PASS_COPY)                                                \
  X(cuMemcpyHtoDAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyPeer, GF_PASS_COPY)                                                \
  X(cuMemcpyPeerAsync, GF_PASS_COPY)                                           \
  X(cuMemcpyWithAttributesAsync, GF_PASS_COPY)                                 \
  X(cuMemsetD16, GF_PASS_COPY)                                                 \
  X(cuMemsetD16Async, GF_PASS_COPY)                                            \
  X(cuMemsetD2D16, GF_PASS_COPY)                                               \
  X(cuMemsetD2D16Async, GF_PASS_COPY)                                          \
  X(cuMemsetD2D32, GF_PASS_COPY)                                               \
  X(cuMemsetD2D32Async, GF_PASS_COPY)                                          \
  X(cuMemsetD2D8, GF_PASS_COPY)                                                \
  X(cuMemsetD2D8Async, GF_PASS_COPY)                                           \
  X(cuMemsetD32, GF_PASS_COPY)                                                 \
  X(cuMemsetD32Async, GF_PASS_COPY)                                            \
  X(cuMemsetD8, GF_PASS_COPY)                                                  \
  X(cuMemsetD8Async, GF_PASS_COPY)                                             \
  X(cuMipmappedArrayGetLevel, GF_PASS_QUERY)                                   \
  X(cuMipmappedArrayGetMemoryRequirements, GF_PASS_QUERY)                      \
  X(cuMipmappedArrayGetSparseProperties, GF_PASS_QUERY)                        \
  X(cuModuleGetFunction, GF_PASS_MODULE)                                       \
  X(cuModuleGetGlobal, GF_PASS_MODULE)                                         \
  X(cuModuleGetLoadingMode, GF_PASS_MODULE)                                    \
  X(cuModuleGetSurfRef, GF_PASS_MODULE)                                        \
  X(cuModuleGetTexRef, GF_PASS_MODULE)                                         \
  X(cuModuleLoad, GF_PASS_MODULE)                                              \
  X(cuModuleLoadData, GF_PASS_MODULE)                                          \
  X(cuModuleLoadFatBinary, GF_PASS_MODULE)                                     \
  X(cuModuleUnload, GF_PASS_MODULE)                                            \
  X(cuOccupancyAvailableDynamicSMemPerBlock, GF_PASS_QUERY)                    \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, GF_PASS_QUERY)       \
  X(cuOccupancyMaxActiveClusters, GF_PASS_QUERY)                               \
  X(cuOccupancyMaxPotentialClusterSize, GF_PASS_QUERY)                         \
  X(cuPointerGetAttribute, GF_PASS_QUERY)                                      \
  X(cuPointerGetAttributes, GF_PASS_QUERY)                                     \
  X(cuProfilerInitialize, GF_PASS_INFO)                                        \
  X(cuProfilerStart, GF_PASS_INFO)                                             \
  X(cuProfilerStop, GF_PASS_INFO)                                              \
  X(cuSignalExternalSemaphoresAsync, GF_PASS_ORDER)                            \
  X(cuStreamAddCallback, GF_PASS_HOSTFN)                                       \
  X(cuStreamAttachMemAsync, GF_PASS_MANAGED)                                   \
  X(cuStreamBatchMemOp, GF_PASS_ORDER)                                         \
  X(cuStreamBeginCapture, GF_PASS_CAPTURE)                                     \
  X(cuStreamBeginCaptureToCig, GF_PASS_CAPTURE)                                \
  X(cuStreamBeginCaptureToGraph, GF_PASS_CAPTURE)                              \
  X(cuStreamBeginRecaptureToGraph, GF_PASS_CAPTURE)                            \
  X(cuStreamCopyAttributes, GF_PASS_SETTING)                                   \
  X(cuStreamCreate, GF_PASS_ORDER)                                             \
  X(cuStreamCreateWithPriority, GF_PASS_ORDER)                                 \
  X(cuStreamDestroy, GF_PASS_ORDER)                                            \
  X(cuStreamEndCapture, GF_PASS_CAPTURE)                                       \
  X(cuStreamEndCaptureToCig, GF_PASS_CAPTURE)                                  \
  X(cuStreamGetAttribute, GF_PASS_QUERY)                                       \
  X(cuStreamGetCaptureInfo, GF_PASS_CAPTURE)                                   \
  X(cuStreamGetCtx, GF_PASS_QUERY)                                             \
  X(cuStreamGetCtx_v2, GF_PASS_QUERY)                                          \
  X(cuStreamGetDevResource, GF_PASS_GREEN)                                     \
  X(cuStreamGetDevice, GF_PASS_QUERY)                                          \
  X(cuStreamGetFlags, GF_PASS_QUERY)                                           \
  X(cuStreamGetId, GF_PASS_QUERY)                                              \
  X(cuStreamGetPriority, GF_PASS_QUERY)                                        \
  X(cuStreamIsCapturing, GF_PASS_CAPTURE)                                      \
  X(cuStreamQuery, GF_PASS_ORDER)                                              \
  X(cuStreamSetAttribute, GF_PASS_SETTING)                                     \
  X(cuStreamSynchronize, GF_PASS_ORDER)                                        \
  X(cuStreamUpdateCaptureDependencies, GF_PASS_CAPTURE)                        \
  X(cuStreamWaitEvent, GF_PASS_ORDER)                                          \
  X(cuStreamWaitValue32, GF_PASS_ORDER)                                        \
  X(cuStreamWaitValue64, GF_PASS_ORDER)                                        \
  X(cuStreamWriteValue32, GF_PASS_ORDER)                                       \
  X(cuStreamWriteValue64, GF_PASS_ORDER)                                       \
  X(cuSurfObjectCreate, GF_PASS_TEXOBJ)                                        \
  X(cuSurfObjectDestroy, GF_PASS_TEXOBJ)                                       \
  X(cuSurfObjectGetResourceDesc, GF_PASS_TEXOBJ)                               \
  X(cuTexObjectCreate, GF_PASS_TEXOBJ)                                         \
  X(cuTexObjectDestroy, GF_PASS_TEXOBJ)                                        \
  X(cuTexObjectGetResourceDesc, GF_PASS_TEXOBJ)                                \
  X(cuTexObjectGetResourceViewDesc, GF_PASS_TEXOBJ)                            \
  X(cuTexObjectGetTextureDesc, GF_PASS_TEXOBJ)                                 \
  X(cuThreadExchangeStreamCaptureMode, GF_PASS_CAPTURE)                        \
  X(cuUserObjectCreate, GF_PASS_GRAPH)                                         \
  X(cuUserObjectRelease, GF_PASS_GRAPH)                                        \
  X(cuUserObjectRetain, GF_PASS_GRAPH)                                         \
  X(cuVDPAUCtxCreate, GF_PASS_INTEROP_CTX)                                     \
  X(cuVDPAUGetDevice, GF_PASS_QUERY)                                           \
  X(cuWaitExternalSemaphoresAsync, GF_PASS_ORDER)

#endif
