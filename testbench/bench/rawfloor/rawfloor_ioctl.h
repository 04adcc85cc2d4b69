/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * nvpeer test bench: userspace ABI of rawfloor.ko (/dev/nvpeer_rawfloor), the
 * registration-path benchmark's floor: one ioctl pins + DMA-maps an emulated
 * GPU range with the NVIDIA P2P API directly (no peer-memory core, no client),
 * one ioctl unmaps + unpins it. The per-registration syscall is the same as
 * for the core emulator's REGISTER/DEREGISTER, so userspace timings of both
 * compare like for like.
 *
 * Registrations belong to the open file; closing it releases what is left.
 * Fixed-size members only, explicit padding; nonzero pad / unknown flags are
 * rejected with -EINVAL.
 */
#ifndef RAWFLOOR_IOCTL_H
#define RAWFLOOR_IOCTL_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define RF_DEVICE_PATH		"/dev/nvpeer_rawfloor"
#define RF_IOC_MAGIC		0xE9	/* 0xE7 nvp2p_emu, 0xE8 peer_mem_emu */

#define RF_REG_PERSISTENT	(1u << 0)	/* get_pages_persistent / put_pages_persistent */
#define RF_REG_FLAGS_ALL	RF_REG_PERSISTENT

struct rf_reg {
	__u64 va;		/* in: 64 KiB aligned, caller's emulated GPU memory */
	__u64 len;		/* in: multiple of 64 KiB, > 0 */
	__u32 flags;		/* in: RF_REG_* */
	__u32 id;		/* out: > 0 */
	__u64 get_ns;		/* out: time inside get_pages(_persistent) */
	__u64 map_ns;		/* out: time inside dma_map_pages */
	__u32 entries;		/* out: DMA mapping entries */
	__u32 pad;		/* in: 0 */
};

struct rf_dereg {
	__u32 id;		/* in */
	__u32 revoked;		/* out: 1 if the free callback had torn it down (no unmap done) */
	__u64 unmap_ns;		/* out: time inside dma_unmap_pages (0 if revoked) */
	__u64 put_ns;		/* out: time inside put_pages(_persistent) */
};

#define RF_IOC_REG	_IOWR(RF_IOC_MAGIC, 0x01, struct rf_reg)
#define RF_IOC_DEREG	_IOWR(RF_IOC_MAGIC, 0x02, struct rf_dereg)

#endif /* RAWFLOOR_IOCTL_H */
