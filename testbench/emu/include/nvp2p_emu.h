/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvp2p_emu.h -- in-kernel test hooks of the NVIDIA P2P provider emulator
 * (nvp2p_emu.ko). Not part of the NVIDIA API: only test fixtures (the
 * peer-memory core emulator, bad-client modules) use these. A product module
 * must never include this header.
 */
#ifndef _NVP2P_EMU_H_
#define _NVP2P_EMU_H_

#include <linux/types.h>
#include "nv-p2p.h"

/*
 * What the provider tells the "DMA stopped" probe after a free callback
 * returned, before it frees the page table and its DMA mappings.
 * All pointers are valid only for the duration of the probe call.
 */
struct nvp2p_emu_revoke_info {
	u64 va;                                   /* pinned range */
	u64 len;
	pid_t tgid;                               /* pinning process */
	void *cb_data;                            /* the `data` given to get_pages */
	const struct nvidia_p2p_page_table *page_table;
	unsigned int nr_mappings;                 /* DMA mappings still linked */
	const struct nvidia_p2p_dma_mapping *const *mappings;
};

/*
 * The "DMA stopped" probe, exported by the peer-memory core emulator
 * (peer_mem_emu.ko) and looked up by the provider with symbol_get() each time
 * a free callback returned, so neither module depends on the other: each
 * loads and unloads on its own, and a registration costs no lookup.
 * Returns true if no device can still DMA to the revoked pages (the client
 * stopped it), false otherwise; false records an NVP2P_EMU_V_DMA_NOT_STOPPED
 * violation. Called with the emulator's RM lock held, on the freeing thread;
 * may sleep briefly, must not call nvidia_p2p_* functions.
 */
bool peer_mem_emu_dma_stopped(const struct nvp2p_emu_revoke_info *info);

/*
 * The fake HCA's look at a client's SGL (peer_mem_emu.ko, by symbol_get()):
 * copies into @out the DMA addresses of @npages 64 KiB GPU pages from @va
 * (rounded down to a GPU page) as one live mapping made for @dev maps them,
 * the mapping whose address for @va's page is @first_dma, of a live pin of
 * process @tgid covering the whole span. Returns 0; -ENOENT when no live pin
 * of @tgid covers the span (not this provider's memory: not judged); -EAGAIN
 * when none matches but a pin's free callback began or a pin ended since
 * nvp2p_emu_pin_generation() gave @since (the client's pin may be the one a
 * racing callback took: not judged); -ENXIO when pins cover it and no mapping
 * for @dev starts its @va page at @first_dma. Takes the emulator's table lock;
 * may sleep.
 */
int nvp2p_emu_mapped_pages(pid_t tgid, u64 va, const struct device *dev,
			   u64 first_dma, u64 *out, u32 npages, u64 since);

/* A count of pins that left the live state (a free callback began, a put, an exit). */
u64 nvp2p_emu_pin_generation(void);

/* True when the current task is inside a free callback issued by the emulator. */
bool nvp2p_emu_in_free_callback(void);

/* Total violations recorded since load or the last reset. */
u64 nvp2p_emu_violation_count(void);

#endif /* _NVP2P_EMU_H_ */
