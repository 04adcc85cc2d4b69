/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * nvpeer test bench: peer-memory client API of the emulated OFED core
 * (peer_mem_emu.ko).
 *
 * Written for nvpeer from the ABI facts of OFED's peer_mem.h (docs/emulators.md, "Headers").
 * Names, member order, types and constants are binary-compatible with the
 * MLNX_OFED / DOCA-OFED header of the same path, so that a client written
 * against that header builds unchanged against this one.  No text was taken
 * from the original.
 *
 * Layout on LP64 (checked by static_assert below):
 *   struct peer_memory_client        136 bytes, ops at 80..128
 *   struct peer_memory_client_ex     152 bytes, ex_size at 136, flags at 144
 *   struct peer_memory_client_ofed49 152 bytes (legacy MLNX_OFED 4.0-4.9)
 */
#ifndef NVPEER_EMU_RDMA_PEER_MEM_H
#define NVPEER_EMU_RDMA_PEER_MEM_H

#include <linux/types.h>
#include <linux/stddef.h>
#include <linux/build_bug.h>
#include <linux/scatterlist.h>
#include <linux/device.h>

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX  16

/* Present since MLNX_OFED 4.0: core_context is a u64 (older cores: void *). */
#define PEER_MEM_U64_CORE_CONTEXT

/*
 * The operations a peer-memory client hands to the core.  The core keeps a
 * pointer to this structure from registration until unregistration returns;
 * the client must neither change nor free it in between.
 *
 * acquire:       "is [addr, addr+size) mine?"  >0 = yes (client_context set),
 *                0 or -errno = no, try the next client.  Called under the
 *                core's global mutex with the raw (unaligned) user range;
 *                peer_mem_private_data and peer_mem_name are NULL.
 * get_pages:     pin the range.  core_context identifies the registration
 *                for the invalidate callback (U32_MAX: no invalidation).
 * dma_map:       allocate and fill *sg_head with DMA addresses for
 *                dma_device; store the number of mapped entries in *nmap.
 * dma_unmap:     undo dma_map.
 * put_pages:     undo get_pages.
 * get_page_size: the granule of the pages emitted by dma_map.
 * release:       undo acquire; last call for this client_context (optional).
 */
struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	int (*acquire)(unsigned long addr, size_t size,
		       void *peer_mem_private_data, char *peer_mem_name,
		       void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context,
			 u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

/*
 * Extended client flags.  PEER_MEM_INVALIDATE_UNMAPS: the core's invalidate
 * does not call dma_unmap/put_pages; the client unmaps itself after the
 * invalidate call returns.
 */
enum {
	PEER_MEM_INVALIDATE_UNMAPS = 1 << 0,
};

/*
 * Extended client.  Register &ex->client.  The core treats the struct as
 * extended only when version[IB_PEER_MEMORY_VER_MAX - 1] != 0 and
 * ex_size >= offsetofend(struct peer_memory_client_ex, flags).
 */
struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

/* The core's invalidate entry point, stored into *invalidate_callback. */
typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

/*
 * Returns an opaque registration handle, or NULL on failure.  When
 * invalidate_callback is non-NULL the client is "invalidating": the core
 * stores its invalidate entry point there and hands out core_context ids.
 */
void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);
/* Blocks until every context acquired through the client is released. */
void ib_unregister_peer_memory_client(void *reg_handle);

/*
 * Legacy MLNX_OFED 4.0 - 4.9 LTS client layout (nvpeer-specific name; the
 * real 4.x header calls this struct peer_memory_client).  The first nine
 * members are identical to struct peer_memory_client; two private-data hooks
 * follow.  A 4.x core skips a client whose get_context_private_data is
 * non-NULL when the user context carries no private data (always, in
 * practice).  peer_mem_emu in "4.9" model reads a registered client through
 * this layout, i.e. it reads the 16 bytes after struct peer_memory_client:
 * for an ex client those are ex_size and flags.
 */
struct peer_memory_client_ofed49 {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	int (*acquire)(unsigned long addr, size_t size,
		       void *peer_mem_private_data, char *peer_mem_name,
		       void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context,
			 u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
	void *(*get_context_private_data)(u64 peer_id);
	void (*put_context_private_data)(void *context);
};

#ifdef CONFIG_64BIT
static_assert(offsetof(struct peer_memory_client, acquire) == 80);
static_assert(offsetof(struct peer_memory_client, get_pages) == 88);
static_assert(offsetof(struct peer_memory_client, dma_map) == 96);
static_assert(offsetof(struct peer_memory_client, dma_unmap) == 104);
static_assert(offsetof(struct peer_memory_client, put_pages) == 112);
static_assert(offsetof(struct peer_memory_client, get_page_size) == 120);
static_assert(offsetof(struct peer_memory_client, release) == 128);
static_assert(sizeof(struct peer_memory_client) == 136);
static_assert(offsetof(struct peer_memory_client_ex, ex_size) == 136);
static_assert(offsetof(struct peer_memory_client_ex, flags) == 144);
static_assert(offsetofend(struct peer_memory_client_ex, flags) == 148);
static_assert(sizeof(struct peer_memory_client_ex) == 152);
static_assert(offsetof(struct peer_memory_client_ofed49, get_context_private_data) == 136);
static_assert(offsetof(struct peer_memory_client_ofed49, put_context_private_data) == 144);
static_assert(sizeof(struct peer_memory_client_ofed49) == 152);
#endif

#endif /* NVPEER_EMU_RDMA_PEER_MEM_H */
