/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvpeer C shim <-> Rust interface (declared again, by hand, in src/ffi.rs).
 * The parameter numbers are an ABI between the two halves of the same .ko only.
 */
#ifndef NVPEER_SHIM_H
#define NVPEER_SHIM_H

#include <linux/types.h>

#ifndef NVPEER_VERSION
#error "NVPEER_VERSION must come from the Kbuild file"
#endif

/* Module parameters the shim declares where the kernel's module! takes none (src/compat.rs). */
enum nvpeer_param {
	NVPEER_P_PERSISTENT_API_SUPPORT = 0,
	NVPEER_P_PEERDIRECT_SUPPORT = 1,
};

struct device;
struct pci_dev;
struct sg_table;

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
void nvpeer_shim_overtakable_enter(void);
void nvpeer_shim_overtakable_exit(void);
#ifndef NVPEER_HAS_MODULE_PARAMS
int nvpeer_shim_param(u32 which);
#endif

#endif /* NVPEER_SHIM_H */
