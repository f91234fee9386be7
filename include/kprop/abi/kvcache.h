/* kvcache: the args of its ops (FAMILIES.md). Included by kprop/abi.h. */
#ifndef KPROP_ABI_KVCACHE_H
#define KPROP_ABI_KVCACHE_H

#ifdef __cplusplus
extern "C" {
#endif

/* (this family's ops are being written) */

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_KVCACHE_H */
