/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * nv-p2p.h -- the NVIDIA GPUDirect RDMA peer-to-peer kernel API, as provided
 * by the nvpeer test bench's emulator (testbench/emu/nvp2p, nvp2p_emu.ko).
 *
 * This text is written by the nvpeer project. It declares the same types,
 * layouts, constants and functions as the NVIDIA driver's nv-p2p.h
 * (open-gpu-kernel-modules 595.xx, see docs/emulators.md, "Headers"), so that
 * a peer-memory client written against the real header builds unchanged
 * against the emulator, and so that bindgen can generate bindings when the
 * real header is not installed.
 *
 * Page-table ABI selection (compile time, for the *client*):
 *   default                -> NVIDIA_P2P_PAGE_TABLE_VERSION 0x00020000
 *                             (580+ drivers; the table has a `flags` member)
 *   -DNVP2P_EMU_PT_V1      -> NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002
 *                             (515..575 drivers; no `flags` member)
 * The emulator itself is always built with the v2 layout (a superset of v1:
 * same offsets, one more member at the end) and chooses at run time which
 * version it reports (module parameter pt_abi=1|2). A v1 client sees a
 * 0x00010002 table whose layout it understands; a v2 client sees 0x00020000.
 *
 * Everything here is plain data layout for LP64; offsets are given in the
 * comments and checked by static assertions in the emulator.
 */
#ifndef _NV_P2P_H_
#define _NV_P2P_H_

#ifdef __KERNEL__
#include <linux/types.h>
#endif

/* ---- structure versions: major in the high 16 bits, minor in the low 16 ---- */

#define NVIDIA_P2P_MAJOR_VERSION_MASK   0xffff0000
#define NVIDIA_P2P_MINOR_VERSION_MASK   0x0000ffff

#define NVIDIA_P2P_MAJOR_VERSION(v) \
	(((v) & NVIDIA_P2P_MAJOR_VERSION_MASK) >> 16)
#define NVIDIA_P2P_MINOR_VERSION(v) \
	((v) & NVIDIA_P2P_MINOR_VERSION_MASK)

/* p points at a driver-filled structure, v is the version the caller knows. */
#define NVIDIA_P2P_MAJOR_VERSION_MATCHES(p, v) \
	(NVIDIA_P2P_MAJOR_VERSION((p)->version) == NVIDIA_P2P_MAJOR_VERSION(v))
#define NVIDIA_P2P_VERSION_COMPATIBLE(p, v) \
	(NVIDIA_P2P_MAJOR_VERSION_MATCHES(p, v) && \
	 (NVIDIA_P2P_MINOR_VERSION((p)->version) >= NVIDIA_P2P_MINOR_VERSION(v)))

/* ---- legacy mailbox parameters (init_mapping; unsupported since CUDA 6) ---- */

enum {
	NVIDIA_P2P_ARCHITECTURE_TESLA = 0,
	NVIDIA_P2P_ARCHITECTURE_FERMI,
	NVIDIA_P2P_ARCHITECTURE_CURRENT = NVIDIA_P2P_ARCHITECTURE_FERMI
};

#define NVIDIA_P2P_PARAMS_VERSION   0x00010001

enum {
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_GPU = 0,
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_THIRD_PARTY_DEVICE,
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_MAX =
		NVIDIA_P2P_PARAMS_ADDRESS_INDEX_THIRD_PARTY_DEVICE
};

#define NVIDIA_P2P_GPU_UUID_LEN   16

typedef struct nvidia_p2p_params {
	uint32_t version;                   /* 0 */
	uint32_t architecture;              /* 4 */
	union nvidia_p2p_mailbox_addresses {
		struct {
			uint64_t wmb_addr;
			uint64_t wmb_data;
			uint64_t rreq_addr;
			uint64_t rcomp_addr;
			uint64_t reserved[2];
		} fermi;                    /* 48 bytes */
	} addresses[NVIDIA_P2P_PARAMS_ADDRESS_INDEX_MAX + 1];  /* 8, 56 */
} nvidia_p2p_params_t;                      /* 104 */

/* ---- capability markers (535+: the persistent-pages API exists) ---- */

#define NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API

/* ---- flags for the persistent API (570+) ---- */

#define NVIDIA_P2P_FLAGS_DEFAULT            0
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING 1

/* ---- page tables ---- */

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB,          /* the only size drivers produce */
	NVIDIA_P2P_PAGE_SIZE_128KB,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

typedef struct nvidia_p2p_page {
	uint64_t physical_address;          /* 0 */
	union nvidia_p2p_request_registers {
		struct {
			uint32_t wreqmb_h;  /* 8 */
			uint32_t rreqmb_h;  /* 12 */
			uint32_t rreqmb_0;  /* 16 */
			uint32_t reserved[3]; /* 20 */
		} fermi;
	} registers;                        /* always zero today */
} nvidia_p2p_page_t;                        /* 32 */

#ifdef NVP2P_EMU_PT_V1
#define NVIDIA_P2P_PAGE_TABLE_VERSION   0x00010002
#else
#define NVIDIA_P2P_PAGE_TABLE_VERSION   0x00020000
#endif

#define NVIDIA_P2P_PAGE_TABLE_VERSION_COMPATIBLE(p) \
	NVIDIA_P2P_VERSION_COMPATIBLE(p, NVIDIA_P2P_PAGE_TABLE_VERSION)

/* Page-table flags (v2 tables only, 580+). */
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1

typedef struct nvidia_p2p_page_table {
	uint32_t version;                   /* 0 */
	uint32_t page_size;                 /* 4: enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;     /* 8: `entries` pointers */
	uint32_t entries;                   /* 16 */
	uint8_t *gpu_uuid;                  /* 24: NVIDIA_P2P_GPU_UUID_LEN bytes */
#ifndef NVP2P_EMU_PT_V1
	uint32_t flags;                     /* 32: NVIDIA_P2P_PAGE_TABLE_FLAGS_* */
#endif
} nvidia_p2p_page_table_t;                  /* 40 (v2) / 32 (v1.2) */

/* ---- DMA mappings ---- */

#define NVIDIA_P2P_DMA_MAPPING_VERSION   0x00020003

#define NVIDIA_P2P_DMA_MAPPING_VERSION_COMPATIBLE(p) \
	NVIDIA_P2P_VERSION_COMPATIBLE(p, NVIDIA_P2P_DMA_MAPPING_VERSION)

struct pci_dev;

typedef struct nvidia_p2p_dma_mapping {
	uint32_t version;                           /* 0 */
	enum nvidia_p2p_page_size_type page_size_type; /* 4 */
	uint32_t entries;                           /* 8 */
	uint64_t *dma_addresses;                    /* 16: one per page */
	void *private;                              /* 24: provider-internal */
	struct pci_dev *pci_dev;                    /* 32: the peer it maps for */
} nvidia_p2p_dma_mapping_t;                         /* 40 */

/* ---- functions (all exported GPL, as drivers 550.40.07+ do) ---- */

/* Legacy mailbox API: both always fail with -ENOTSUPP. */
int nvidia_p2p_init_mapping(uint64_t p2p_token,
			    struct nvidia_p2p_params *params,
			    void (*destroy_callback)(void *data),
			    void *data);
int nvidia_p2p_destroy_mapping(uint64_t p2p_token);

/*
 * Pin [virtual_address, virtual_address + length) of the calling process's
 * GPU memory (token and va_space 0) for third-party DMA. Both values must be
 * 64 KiB aligned; free_callback and data must be non-NULL. free_callback(data)
 * runs, synchronously and with the provider's lock held, when the memory is
 * freed by its owner; it must stop device DMA and must not call back into
 * this API (except the two free_* no-ops). May sleep.
 * Returns 0, -EINVAL, -ENOTSUPP, -ENOMEM or -EIO.
 */
int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data),
			 void *data);

/*
 * Pin without a callback; the memory stays allocated until
 * nvidia_p2p_put_pages_persistent(). flags: NVIDIA_P2P_FLAGS_*.
 */
int nvidia_p2p_get_pages_persistent(uint64_t virtual_address,
				    uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags);

/* Map every page of page_table for DMA by peer. */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);

/* Undo nvidia_p2p_dma_map_pages(); not from inside the free callback. */
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);

/*
 * Release a non-persistent pin, from the process that pinned it; returns 0
 * (without touching page_table) if the free callback already tore it down.
 * Blocks while any free callback is running. Not from inside the callback.
 */
int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table);

/* Release a persistent pin (any context). flags must be 0. */
int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags);

/* The two calls allowed inside the free callback; both are no-ops, 0. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

/* ---- rsync (POWER/NVLink relaxed-ordering) hooks ---- */

#define NVIDIA_P2P_RSYNC_DRIVER_VERSION   0x00010001

#define NVIDIA_P2P_RSYNC_DRIVER_VERSION_COMPATIBLE(p) \
	NVIDIA_P2P_VERSION_COMPATIBLE(p, NVIDIA_P2P_RSYNC_DRIVER_VERSION)

typedef struct nvidia_p2p_rsync_driver {
	uint32_t version;                                        /* 0 */
	int (*get_relaxed_ordering_mode)(int *mode, void *data); /* 8 */
	void (*put_relaxed_ordering_mode)(int mode, void *data); /* 16 */
	void (*wait_for_rsync)(struct pci_dev *gpu, void *data); /* 24 */
} nvidia_p2p_rsync_driver_t;                                     /* 32 */

/* 0, -EINVAL (bad arguments) or -EBUSY (one is already registered). */
int nvidia_p2p_register_rsync_driver(nvidia_p2p_rsync_driver_t *driver,
				     void *data);
void nvidia_p2p_unregister_rsync_driver(nvidia_p2p_rsync_driver_t *driver,
					void *data);

#define NVIDIA_P2P_RSYNC_REG_INFO_VERSION   0x00020001

#define NVIDIA_P2P_RSYNC_REG_INFO_VERSION_COMPATIBLE(p) \
	NVIDIA_P2P_VERSION_COMPATIBLE(p, NVIDIA_P2P_RSYNC_REG_INFO_VERSION)

typedef struct nvidia_p2p_rsync_reg {
	void *ptr;                  /* 0 */
	size_t size;                /* 8 */
	struct pci_dev *ibmnpu;     /* 16 */
	struct pci_dev *gpu;        /* 24 */
	uint32_t cluster_id;        /* 32 */
	uint32_t socket_id;         /* 36 */
} nvidia_p2p_rsync_reg_t;           /* 40 */

typedef struct nvidia_p2p_rsync_reg_info {
	uint32_t version;           /* 0 */
	nvidia_p2p_rsync_reg_t *regs; /* 8 */
	size_t entries;             /* 16 */
} nvidia_p2p_rsync_reg_info_t;      /* 24 */

/* No NPUs anywhere today: -ENODEV. put is a no-op. */
int nvidia_p2p_get_rsync_registers(nvidia_p2p_rsync_reg_info_t **reg_info);
void nvidia_p2p_put_rsync_registers(nvidia_p2p_rsync_reg_info_t *reg_info);

#endif /* _NV_P2P_H_ */
