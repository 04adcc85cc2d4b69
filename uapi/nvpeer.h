/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * nvpeer: names and paths a tool can rely on (documentation: uapi/debugfs.md, uapi/sysfs.md,
 * uapi/modinfo.md). nvpeer has no ioctl ABI; everything is text in debugfs/sysfs/modinfo.
 * The formats are versioned by NVPEER_UAPI_VERSION: a change that removes or renames a key or a
 * field bumps it; adding keys or fields at the end does not.
 */
#ifndef _UAPI_NVPEER_H
#define _UAPI_NVPEER_H

#define NVPEER_UAPI_VERSION 1

/* Module and peer-memory client names. */
#define NVPEER_MODULE_NAME          "nvpeer"
#define NVPEER_CLIENT_NAME          "nv_mem"     /* persistent (default) or invalidating */
#define NVPEER_CLIENT_NAME_NC       "nv_mem_nc"  /* persistent, with persistent_api_support=0 */

/* Paths. */
#define NVPEER_DEBUGFS_DIR          "/sys/kernel/debug/nvpeer"
#define NVPEER_DEBUGFS_STATS        NVPEER_DEBUGFS_DIR "/stats"   /* "key value\n" lines */
#define NVPEER_DEBUGFS_MRS          NVPEER_DEBUGFS_DIR "/mrs"     /* one registration per line */
#define NVPEER_DEBUGFS_CONFIG       NVPEER_DEBUGFS_DIR "/config"  /* "key value...\n" lines */
#define NVPEER_SYSFS_MODULE_VERSION "/sys/module/nvpeer/version"
/* Created by the peer-memory core (ib_core), not by nvpeer: */
#define NVPEER_PEERS_DIR            "/sys/kernel/mm/memory_peers"
#define NVPEER_PEERS_NV_MEM_VERSION NVPEER_PEERS_DIR "/nv_mem/version"

/* Keys of NVPEER_DEBUGFS_STATS, in file order (see uapi/debugfs.md for meanings). */
#define NVPEER_STATS_KEYS \
	"acquire_calls", "acquire_claimed", "acquire_declined", "get_pages_calls", \
	"dma_map_calls", "dma_unmap_calls", "put_pages_calls", "get_page_size_calls", \
	"release_calls", "registrations", "live_mrs", "pinned_bytes", "pinned_bytes_total", \
	"repins", "callbacks", "invalidations", "callbacks_unmapped", "callbacks_stale", \
	"orphaned_pins", "provider_get_pages", "provider_get_pages_persistent", \
	"provider_put_pages", "provider_put_pages_persistent", "provider_dma_map_pages", \
	"provider_dma_unmap_pages", "provider_free_page_table", "provider_free_dma_mapping", \
	"err_pin", "err_range", "err_page_table_version", "err_page_size", "err_entries", \
	"err_not_pci", "err_dma_map", "err_dma_mapping_version", "err_nomem", "err_sgl", \
	"err_put", "err_unmap", "err_revoked", "err_order", "err_sg_mismatch", "overtaken_calls", \
	"pin_waits"

/* Values of the `state=` field of NVPEER_DEBUGFS_MRS. */
#define NVPEER_MR_STATES \
	"idle", "pinned", "held", "mapping", "mapped", "unmapped", "unpinning", \
	"invalidating", "revoked", "orphaned", "released"

#endif /* _UAPI_NVPEER_H */
