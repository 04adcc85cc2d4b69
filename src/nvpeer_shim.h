/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvpeer C shim <-> Rust interface (declared again, by hand, in src/ffi.rs).
 * The fact numbers are an ABI between the two halves of the same .ko only.
 */
#ifndef NVPEER_SHIM_H
#define NVPEER_SHIM_H

#include <linux/types.h>

#ifndef NVPEER_VERSION
#error "NVPEER_VERSION must come from the Kbuild file"
#endif

enum nvpeer_layout_fact {
	NVPEER_L_CLIENT_SIZE = 0,
	NVPEER_L_CLIENT_VERSION = 1,
	NVPEER_L_CLIENT_ACQUIRE = 2,
	NVPEER_L_CLIENT_RELEASE = 3,
	NVPEER_L_CLIENT_EX_SIZE = 4,
	NVPEER_L_CLIENT_EX_EX_SIZE = 5,
	NVPEER_L_CLIENT_EX_FLAGS = 6,
	NVPEER_L_INVALIDATE_UNMAPS = 7,
	NVPEER_L_NAME_MAX = 8,
	NVPEER_L_VER_MAX = 9,
	NVPEER_L_PT_ENTRIES = 10,
	NVPEER_L_PT_GPU_UUID = 11,
	NVPEER_L_PAGE_SIZE = 12,
	NVPEER_L_DM_ENTRIES = 13,
	NVPEER_L_DM_ADDRESSES = 14,
	NVPEER_L_DM_SIZE = 15,
	NVPEER_L_PAGE_SIZE_64KB = 16,
	NVPEER_L_DMA_MAPPING_VERSION = 17,
};

/* Module parameters the shim declares where the kernel's module! takes none (src/compat.rs). */
enum nvpeer_param {
	NVPEER_P_PERSISTENT_API_SUPPORT = 0,
	NVPEER_P_PEERDIRECT_SUPPORT = 1,
};

struct device;
struct pci_dev;
struct sg_table;

const char *nvpeer_shim_version(void);
u64 nvpeer_shim_layout(u32 fact);
struct pci_dev *nvpeer_shim_pci_dev(struct device *dev);
int nvpeer_shim_sg_fill(struct sg_table *sgt, const u64 *addrs, u32 n, u32 len);
bool nvpeer_shim_module_get(void);
void nvpeer_shim_module_put(void);
bool nvpeer_shim_peer_client_visible(const char *name);
const char *nvpeer_shim_other_nv_mem_module(void);
const char *nvpeer_shim_module_name(void);
bool nvpeer_shim_ratelimit(void);
void nvpeer_shim_overtaken_begin(void);
void nvpeer_shim_overtaken_end(void);
int nvpeer_shim_overtaken_wait(void);
#ifndef NVPEER_HAS_MODULE_PARAMS
int nvpeer_shim_param(u32 which);
#endif

#endif /* NVPEER_SHIM_H */
