// SPDX-License-Identifier: GPL-2.0
/*
 * The layout facts of the two foreign API headers (OFED's peer_mem.h, NVIDIA's nv-p2p.h) as this
 * build compiles them. Never linked: Kbuild compiles this file to assembly and turns each DEFINE
 * into a Rust constant (src/abi_facts.rs in the build tree, the kernel's asm-offsets technique),
 * and src/abi.rs asserts the hand-written layouts of src/ffi.rs against those constants, so a
 * header that drifts fails the build.
 */
#include <linux/kbuild.h>
#include <linux/scatterlist.h>
#include <linux/stddef.h>
#include <rdma/peer_mem.h>
#include <nv-p2p.h>

void nvpeer_abi_facts(void);

void nvpeer_abi_facts(void)
{
	DEFINE(SIZEOF_PEER_MEMORY_CLIENT, sizeof(struct peer_memory_client));
	OFFSET(OFFSETOF_CLIENT_VERSION, peer_memory_client, version);
	OFFSET(OFFSETOF_CLIENT_ACQUIRE, peer_memory_client, acquire);
	OFFSET(OFFSETOF_CLIENT_RELEASE, peer_memory_client, release);
	DEFINE(SIZEOF_PEER_MEMORY_CLIENT_EX, sizeof(struct peer_memory_client_ex));
	OFFSET(OFFSETOF_CLIENT_EX_EX_SIZE, peer_memory_client_ex, ex_size);
	OFFSET(OFFSETOF_CLIENT_EX_FLAGS, peer_memory_client_ex, flags);
	DEFINE(PEER_MEM_INVALIDATE_UNMAPS, PEER_MEM_INVALIDATE_UNMAPS);
	DEFINE(IB_PEER_MEMORY_NAME_MAX, IB_PEER_MEMORY_NAME_MAX);
	DEFINE(IB_PEER_MEMORY_VER_MAX, IB_PEER_MEMORY_VER_MAX);
	OFFSET(OFFSETOF_PAGE_TABLE_ENTRIES, nvidia_p2p_page_table, entries);
	OFFSET(OFFSETOF_PAGE_TABLE_GPU_UUID, nvidia_p2p_page_table, gpu_uuid);
	DEFINE(SIZEOF_NVIDIA_P2P_PAGE, sizeof(struct nvidia_p2p_page));
	OFFSET(OFFSETOF_DMA_MAPPING_ENTRIES, nvidia_p2p_dma_mapping, entries);
	OFFSET(OFFSETOF_DMA_MAPPING_DMA_ADDRESSES, nvidia_p2p_dma_mapping, dma_addresses);
	DEFINE(SIZEOF_NVIDIA_P2P_DMA_MAPPING, sizeof(struct nvidia_p2p_dma_mapping));
	DEFINE(NVIDIA_P2P_PAGE_SIZE_64KB, NVIDIA_P2P_PAGE_SIZE_64KB);
	DEFINE(NVIDIA_P2P_DMA_MAPPING_VERSION, NVIDIA_P2P_DMA_MAPPING_VERSION);
}
