// SPDX-License-Identifier: GPL-2.0
/*
 * nvpeer: the C part of the module.
 *
 * What Rust cannot express out of tree, and nothing else:
 *   - modinfo tags that module! does not take (version). No softdep: the symbol dependencies on
 *     nvidia and ib_core already order the load, and a soft dependency would make `modprobe -r`
 *     try to remove both (the NVIDIA driver with it, where nothing else holds it; with kmod 34 an
 *     exit 1 where something does);
 *   - C macros and inline functions (sg_dma_address/sg_dma_len, module_put on THIS_MODULE,
 *     wait_event_killable);
 *   - a statically initialised wait queue (src/overtaken.rs), which needs no
 *     allocation at load nor freeing at unload, and the lockdep map that shows lockdep the wait;
 *   - on kernels whose module! takes no parameters (before 6.19), the two module parameters,
 *     with the names, types, permissions and descriptions module! gives them elsewhere, and the
 *     record of which side of each Rust API difference this build took (modinfo `compat`).
 * Every function is called only from src/ffi.rs' declarations.
 */
#include <linux/lockdep.h>
#include <linux/module.h>
#include <linux/namei.h>
#include <linux/ratelimit.h>
#include <linux/scatterlist.h>
#include <linux/stddef.h>
#include <linux/wait.h>
#include <rdma/peer_mem.h>
#include <nv-p2p.h>

#include "nvpeer_shim.h"

MODULE_VERSION(NVPEER_VERSION);

/*
 * Which side of each Rust kernel API difference this build took (src/compat.rs; the flags come
 * from scripts/compat-probe.sh): `modinfo -F compat` names them, for the bench and for bug reports.
 */
#ifdef NVPEER_HAS_MODULE_PARAMS
#define NVPEER_CI_PARAMS "module_params=kernel"
#else
#define NVPEER_CI_PARAMS "module_params=shim"
#endif
#ifdef NVPEER_HAS_CORE_CSTR
#define NVPEER_CI_CSTR "core_cstr=kernel"
#else
#define NVPEER_CI_CSTR "core_cstr=fallback"
#endif
#ifdef NVPEER_HAS_PR_ONCE
#define NVPEER_CI_ONCE "pr_once=kernel"
#else
#define NVPEER_CI_ONCE "pr_once=fallback"
#endif
#ifdef NVPEER_HAS_ATOMIC_BOOL
#define NVPEER_CI_BOOL "atomic_bool=kernel"
#else
#define NVPEER_CI_BOOL "atomic_bool=fallback"
#endif
#ifdef NVPEER_HAS_ATOMIC_PTR
#define NVPEER_CI_PTR "atomic_ptr=kernel"
#else
#define NVPEER_CI_PTR "atomic_ptr=fallback"
#endif
#ifdef NVPEER_HAS_FETCH_SUB
#define NVPEER_CI_SUB "fetch_sub=kernel"
#else
#define NVPEER_CI_SUB "fetch_sub=fallback"
#endif
#if !defined(NVPEER_HAS_MODULE_PARAMS)
#define NVPEER_CI_COPY "param_value_copy=n/a"
#elif defined(NVPEER_HAS_PARAM_VALUE_COPY)
#define NVPEER_CI_COPY "param_value_copy=kernel"
#else
#define NVPEER_CI_COPY "param_value_copy=by-reference"
#endif
MODULE_INFO(compat, NVPEER_CI_PARAMS " " NVPEER_CI_CSTR " " NVPEER_CI_ONCE " " NVPEER_CI_BOOL
		    " " NVPEER_CI_PTR " " NVPEER_CI_SUB " " NVPEER_CI_COPY);

#ifndef NVPEER_HAS_MODULE_PARAMS
/*
 * As module! declares them from 6.19 (src/nvpeer_main.rs): a 32-bit signed integer shown by
 * modinfo as (i32), permission 0 (not in sysfs), the same descriptions.
 */
static int persistent_api_support = 1;
module_param_cb(persistent_api_support, &param_ops_int, &persistent_api_support, 0);
__MODULE_PARM_TYPE(persistent_api_support, "i32");
MODULE_PARM_DESC(persistent_api_support,
		 "1: one persistent client named nv_mem (default); 0: invalidating nv_mem + persistent nv_mem_nc");
static int peerdirect_support;
module_param_cb(peerdirect_support, &param_ops_int, &peerdirect_support, 0);
__MODULE_PARM_TYPE(peerdirect_support, "i32");
MODULE_PARM_DESC(peerdirect_support,
		 "1: invalidating client in the MLNX_OFED 4.x layout (OFED 4.9 LTS); 0: extended client");

int nvpeer_shim_param(u32 which)
{
	switch (which) {
	case NVPEER_P_PERSISTENT_API_SUPPORT:
		return persistent_api_support;
	case NVPEER_P_PEERDIRECT_SUPPORT:
		return peerdirect_support;
	}
	return -1;
}
#endif

/*
 * Fill an allocated table with one DMA-only entry per address (no struct page: the memory is a
 * GPU BAR). Returns -EINVAL when the table does not have exactly n entries.
 */
int nvpeer_shim_sg_fill(struct sg_table *sgt, const u64 *addrs, u32 n, u32 len)
{
	struct scatterlist *sg;
	unsigned int i;

	if (!sgt || !sgt->sgl || sgt->nents != n)
		return -EINVAL;
	for_each_sg(sgt->sgl, sg, sgt->nents, i) {
		sg_set_page(sg, NULL, len, 0);
		sg_dma_address(sg) = addrs[i];
		sg_dma_len(sg) = len;
	}
	return 0;
}

/* A module reference per live registration (pins may outlive the core's use of them). */
bool nvpeer_shim_module_get(void)
{
	return try_module_get(THIS_MODULE);
}

void nvpeer_shim_module_put(void)
{
	module_put(THIS_MODULE);
}

/*
 * Another loaded module that serves the nv_mem client (NVIDIA's nvidia_peermem, Mellanox's
 * nv_peer_mem), or NULL. Looked up in /sys/module, which exists on every kernel: the core's
 * memory_peers directory (below) does not exist under DOCA-OFED on kernels that no longer export
 * mm_kobj, and that core accepts a second client of the same name. This module's own name is
 * skipped: loaded as nvidia-peermem, its /sys/module entry exists while it initialises (and the
 * module loader already refuses a second module of one name). The lookup races a module loading
 * at the same instant; it is a guard against a configuration mistake, not a lock.
 */
const char *nvpeer_shim_other_nv_mem_module(void)
{
	static const char *const names[] = { "nvidia_peermem", "nv_peer_mem" };
	char path[48];
	struct path p;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(names); i++) {
		if (!strcmp(names[i], KBUILD_MODNAME))
			continue;
		snprintf(path, sizeof(path), "/sys/module/%s", names[i]);
		if (kern_path(path, LOOKUP_FOLLOW, &p))
			continue;
		path_put(&p);
		return names[i];
	}
	return NULL;
}

/* Whether a rate-limited message may be printed now (the kernel's default burst and interval). */
bool nvpeer_shim_ratelimit(void)
{
	static DEFINE_RATELIMIT_STATE(rs, DEFAULT_RATELIMIT_INTERVAL, DEFAULT_RATELIMIT_BURST);

	return __ratelimit(&rs);
}

/* The name this module was built under (nvpeer or nvidia_peermem), for messages. */
const char *nvpeer_shim_module_name(void)
{
	return KBUILD_MODNAME;
}

/* Whether the core already shows a client of this name in sysfs (for an actionable error). */
bool nvpeer_shim_peer_client_visible(const char *name)
{
	char path[96];
	struct path p;

	if (snprintf(path, sizeof(path), "/sys/kernel/mm/memory_peers/%s", name) >= sizeof(path))
		return false;
	if (kern_path(path, LOOKUP_FOLLOW, &p))
		return false;
	path_put(&p);
	return true;
}

/*
 * Provider calls of ours that a free callback overtook and that have not returned yet, and the
 * pins that wait for them (src/overtaken.rs).
 */
static atomic_t nvpeer_overtaken = ATOMIC_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(nvpeer_overtaken_wq);

/*
 * The wait as lockdep sees it (a wait queue alone is invisible to it): every provider call a
 * free callback can overtake holds this map, shared, from before it asks NVIDIA until it
 * returned; a pin's wait takes it exclusively and drops it at once, whether anything is in
 * flight or not, as flush_work() does with a work item's map. So whatever a pin holds when it
 * waits is ordered before every lock an overtakable call takes (NVIDIA's, inside the call),
 * and a pin made where such a lock is held, such as from inside a free callback, is reported
 * as a cycle the first time it happens, not only the day it hangs.
 */
#ifdef CONFIG_LOCKDEP
static struct lock_class_key nvpeer_overtaken_key;
static struct lockdep_map nvpeer_overtaken_map =
	STATIC_LOCKDEP_MAP_INIT("nvpeer_overtaken_wait", &nvpeer_overtaken_key);
#endif

void nvpeer_shim_overtakable_enter(void)
{
#ifdef CONFIG_LOCKDEP
	lock_map_acquire_read(&nvpeer_overtaken_map);
#endif
}

void nvpeer_shim_overtakable_exit(void)
{
#ifdef CONFIG_LOCKDEP
	lock_map_release(&nvpeer_overtaken_map);
#endif
}

void nvpeer_shim_overtaken_begin(void)
{
	atomic_inc(&nvpeer_overtaken);
}

void nvpeer_shim_overtaken_end(void)
{
	if (atomic_dec_and_test(&nvpeer_overtaken))
		wake_up_all(&nvpeer_overtaken_wq);
}

/* 0: none in flight; 1: waited until none was; -ERESTARTSYS: a fatal signal came first. */
int nvpeer_shim_overtaken_wait(void)
{
	int ret;

#ifdef CONFIG_LOCKDEP
	lock_map_acquire(&nvpeer_overtaken_map);
	lock_map_release(&nvpeer_overtaken_map);
#endif
	if (!atomic_read(&nvpeer_overtaken))
		return 0;
	ret = wait_event_killable(nvpeer_overtaken_wq, !atomic_read(&nvpeer_overtaken));
	return ret ? ret : 1;
}
