// SPDX-License-Identifier: GPL-2.0
/*
 * classic_peer: a minimal, correct peer-memory client that follows the
 * classic call pattern of the C GPUDirect RDMA clients (docs/emulators.md
 * section 3.3), written from scratch for the nvpeer test bench.
 *
 * Call pattern kept on purpose (it is the baseline for registration
 * benchmarks and the reference the bad clients are derived from):
 *   - acquire probes the range with a full pin + unpin;
 *   - get_pages pins a second time (the pin that is kept);
 *   - the free callback marks itself with callback_task == current so that a
 *     legacy core calling dma_unmap/put_pages from inside invalidate finds
 *     them to be no-ops;
 *   - the invalidating client is an "ex" client with
 *     PEER_MEM_INVALIDATE_UNMAPS unless peerdirect_support=1;
 *   - persistent_api_support selects the persistent (no callback) client.
 *
 * Where the classic modules have known hazards (docs/design.md) this client
 * closes them in the smallest way that keeps the pattern:
 *   H1  the context is refcounted: the core's acquire..release and NVIDIA's
 *       get_pages..callback/put each hold a reference;
 *   H2  dma_unmap holds the context lock across nvidia_p2p_dma_unmap_pages and
 *       the callback takes that lock before returning to the provider;
 *   H3  no client lock is held across get_pages/put_pages/dma_map_pages or
 *       across the core's invalidate;
 *   H4  a callback that arrives before dma_map finished does not call the
 *       core (the core holds mapping_lock until activation); it only marks
 *       the context revoked and dma_map then fails;
 *   H5  put_pages from a process other than the owner does not unpin; the
 *       pin stays with its callback, which keeps the context alive;
 *   H6  dma_map refuses a dma_device that is not a PCI device.
 *
 * bad_clients/bad_peer.c includes this file with CP_BUG() defined to switch
 * individual rules off; in this module CP_BUG() is always false.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/mutex.h>
#include <linux/kref.h>
#include <linux/sched.h>
#include <linux/scatterlist.h>
#include <linux/string.h>
#include <linux/align.h>

#include <nv-p2p.h>
#include <rdma/peer_mem.h>

#ifndef CP_BUG
#define CP_BUG(name) false
#define CP_BAD_INIT() 0
#define CP_MODNAME "classic_peer"
#endif

#define CP_GPU_PAGE_SIZE	(64UL * 1024)
#define CP_GPU_PAGE_MASK	(~(CP_GPU_PAGE_SIZE - 1))
#define CP_VERSION		"1.0-classic"
#define CP_NO_CORE_CONTEXT	((u64)U32_MAX)

static int persistent_api_support = 1;
module_param(persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "1 (default): one persistent client \"nv_mem\"; 0: invalidating \"nv_mem\" plus persistent \"nv_mem_nc\"");

static int peerdirect_support;
module_param(peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "0 (default): ex client with INVALIDATE_UNMAPS; 1: legacy layout (ex_size 0, flags 0) for old cores");

/*
 * Life of one registration (one acquire), as seen by this client.  Moves are
 * made under cp_ctx.lock.
 */
enum cp_state {
	CP_ACQUIRED,	/* acquire probed the range; nothing pinned */
	CP_PINNING,	/* get_pages is calling the provider */
	CP_PINNED,	/* pinned, callback registered, not DMA-mapped */
	CP_MAPPING,	/* dma_map is calling the provider */
	CP_MAPPED,	/* DMA-mapped; the core may use the pages */
	CP_UNMAPPED,	/* the core called dma_unmap; still pinned */
	CP_INVALIDATING,/* free callback is telling the core */
	CP_REVOKED,	/* free callback ran; the provider owns the teardown */
	CP_UNPINNING,	/* put_pages is calling the provider */
	CP_UNPINNED,	/* put_pages done */
	CP_ORPHANED,	/* put_pages ran in a foreign process; pin left to the callback */
};

struct cp_client;

/*
 * Per-registration context.
 *
 * Invariants:
 *   - refs counts one reference for the core (acquire..release) and one for
 *     the provider while a non-persistent pin is registered
 *     (get_pages..callback or put_pages); the context is freed at zero.
 *   - page_table/dma_mapping are only dereferenced under lock and only in
 *     states where the provider has not torn them down.
 *   - sg is the copy of the table handed to the core; it is freed once, in
 *     release (or in dma_map's own error path).
 */
struct cp_ctx {
	struct kref refs;
	struct mutex lock;
	struct cp_client *client;
	enum cp_state state;
	struct nvidia_p2p_page_table *page_table;
	struct nvidia_p2p_dma_mapping *dma_mapping;
	struct pci_dev *pdev;
	u64 core_context;
	u64 va_start;
	u64 mapped_size;
	pid_t owner_tgid;
	struct task_struct *callback_task;
	bool sg_allocated;
	struct sg_table sg;
};

struct cp_client {
	struct peer_memory_client_ex ex;
	void *reg_handle;
	invalidate_peer_memory invalidate;
	bool persistent;
};

static struct cp_client cp_inval_client;
static struct cp_client cp_persist_client;

static void cp_ctx_free(struct kref *kref)
{
	struct cp_ctx *ctx = container_of(kref, struct cp_ctx, refs);

	mutex_destroy(&ctx->lock);
	kfree(ctx);
	module_put(THIS_MODULE);
}

static void cp_ctx_put(struct cp_ctx *ctx)
{
	kref_put(&ctx->refs, cp_ctx_free);
}

static bool cp_range(unsigned long addr, size_t size, u64 *start, u64 *len)
{
	u64 end;

	if (!size || check_add_overflow((u64)addr, (u64)size, &end) ||
	    end > U64_MAX - CP_GPU_PAGE_SIZE)
		return false;
	if (CP_BUG(unaligned)) {
		*start = addr;
		*len = size;
		return true;
	}
	*start = addr & CP_GPU_PAGE_MASK;
	*len = ALIGN(end, CP_GPU_PAGE_SIZE) - *start;
	return true;
}

/* Free callback of the throw-away probe pin taken in acquire. */
static void cp_probe_free_callback(void *data)
{
	/* The provider frees the table after we return; nothing to undo. */
}

/*
 * acquire: probe whether [addr, addr+size) is emulated GPU memory of the
 * calling process by pinning and unpinning it (the classic pattern).
 */
static int cp_acquire(struct cp_client *client, unsigned long addr, size_t size,
		      void **client_context)
{
	struct nvidia_p2p_page_table *pt = NULL;
	struct cp_ctx *ctx;
	u64 start, len;
	int ret;

	if (!cp_range(addr, size, &start, &len))
		return 0;
	ctx = kzalloc_obj(*ctx);
	if (!ctx)
		return 0;

	if (client->persistent) {
		ret = nvidia_p2p_get_pages_persistent(start, len, &pt, 0);
		if (!ret)
			nvidia_p2p_put_pages_persistent(start, pt, 0);
	} else {
		ret = nvidia_p2p_get_pages(0, 0, start, len, &pt,
					   cp_probe_free_callback, ctx);
		if (!ret)
			nvidia_p2p_put_pages(0, 0, start, pt);
	}
	if (ret) {
		kfree(ctx);
		return 0;
	}

	kref_init(&ctx->refs);
	mutex_init(&ctx->lock);
	ctx->client = client;
	ctx->state = CP_ACQUIRED;
	ctx->va_start = start;
	ctx->mapped_size = len;
	ctx->core_context = CP_NO_CORE_CONTEXT;
	ctx->owner_tgid = current->tgid;
	__module_get(THIS_MODULE);
	*client_context = ctx;
	return 1;
}

static int cp_acquire_inval(unsigned long addr, size_t size, void *priv,
			    char *name, void **client_context)
{
	return cp_acquire(&cp_inval_client, addr, size, client_context);
}

static int cp_acquire_persist(unsigned long addr, size_t size, void *priv,
			      char *name, void **client_context)
{
	return cp_acquire(&cp_persist_client, addr, size, client_context);
}

/*
 * The provider's free callback for the kept pin.  Runs on the thread that
 * frees the GPU memory, with the provider's lock held; page_table and
 * dma_mapping are valid until we return.
 */
static void cp_free_callback(void *data)
{
	struct cp_ctx *ctx = data;
	struct cp_client *client = ctx->client;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	bool tell_core = false;

	mutex_lock(&ctx->lock);
	/* Still valid while we run; the provider frees them after we return. */
	pt = ctx->page_table;
	map = ctx->dma_mapping;
	switch (ctx->state) {
	case CP_MAPPED:
		/*
		 * The core may be using the mapping: tell it, without holding
		 * our lock (the core takes its mapping_lock, and a legacy core
		 * calls back into dma_unmap/put_pages on this thread).
		 */
		ctx->state = CP_INVALIDATING;
		ctx->callback_task = current;
		tell_core = true;
		break;
	case CP_PINNING:
	case CP_PINNED:
	case CP_MAPPING:
		/*
		 * Registration still running: the core holds mapping_lock and
		 * may be waiting for the provider lock we run under, so calling
		 * invalidate would deadlock.  dma_map/get_pages see REVOKED and
		 * fail the registration instead.
		 */
	case CP_UNMAPPED:
	case CP_UNPINNING:
	case CP_ORPHANED:
		/* The core has stopped using the pages already. */
		ctx->state = CP_REVOKED;
		break;
	default:
		pr_err(CP_MODNAME ": free callback in unexpected state %d\n",
		       ctx->state);
		break;
	}
	mutex_unlock(&ctx->lock);

	if (tell_core) {
		if (CP_BUG(put_in_callback))
			nvidia_p2p_put_pages(0, 0, ctx->va_start, pt);
		if (CP_BUG(write_after_release)) {
			/*
			 * No reference of our own across invalidate, then the
			 * classic write after it returns (hazard H1): on a 4.x
			 * core release() ran inside invalidate.
			 */
			cp_ctx_put(ctx);
			client->invalidate(client->reg_handle, ctx->core_context);
			ctx->callback_task = NULL;
			return;
		}
		/* bug=no_invalidate: returns as if the core had stopped DMA; it never heard */
		if (!CP_BUG(no_invalidate))
			client->invalidate(client->reg_handle, ctx->core_context);
		mutex_lock(&ctx->lock);
		ctx->callback_task = NULL;
		ctx->state = CP_REVOKED;
		mutex_unlock(&ctx->lock);
	}
	/* Documented as the calls to make inside the callback (no-ops today). */
	if (map)
		nvidia_p2p_free_dma_mapping(map);
	if (pt)
		nvidia_p2p_free_page_table(pt);
	cp_ctx_put(ctx);	/* the provider's reference */
}

static int cp_get_pages(unsigned long addr, size_t size, int write, int force,
			struct sg_table *sg_head, void *client_context,
			u64 core_context)
{
	struct cp_ctx *ctx = client_context;
	struct nvidia_p2p_page_table *pt = NULL;
	bool persistent = ctx->client->persistent;
	int ret;

	mutex_lock(&ctx->lock);
	if (ctx->state != CP_ACQUIRED) {
		mutex_unlock(&ctx->lock);
		return -EINVAL;
	}
	ctx->core_context = core_context;
	ctx->state = CP_PINNING;
	mutex_unlock(&ctx->lock);

	if (persistent) {
		ret = nvidia_p2p_get_pages_persistent(ctx->va_start,
						      ctx->mapped_size, &pt, 0);
	} else {
		kref_get(&ctx->refs);	/* for the provider, until callback/put */
		ret = nvidia_p2p_get_pages(0, 0, ctx->va_start, ctx->mapped_size,
					   &pt, cp_free_callback, ctx);
		if (ret)
			cp_ctx_put(ctx);
	}

	mutex_lock(&ctx->lock);
	if (ret) {
		ctx->state = CP_ACQUIRED;
	} else if (ctx->state == CP_REVOKED) {
		/* Freed between pin and return: the callback already ran. */
		ret = -EFAULT;
	} else {
		ctx->page_table = pt;
		ctx->state = CP_PINNED;
	}
	mutex_unlock(&ctx->lock);
	return ret;
}

static int cp_fill_sg(struct cp_ctx *ctx, struct sg_table *sg_head,
		      struct nvidia_p2p_dma_mapping *map)
{
	struct scatterlist *sg;
	unsigned int i;
	int ret;

	ret = sg_alloc_table(sg_head, map->entries, GFP_KERNEL);
	if (ret)
		return ret;
	for_each_sg(sg_head->sgl, sg, map->entries, i) {
		sg_set_page(sg, NULL, CP_GPU_PAGE_SIZE, 0);
		sg_dma_address(sg) = map->dma_addresses[i];
		sg_dma_len(sg) = CP_BUG(bad_sg_len) ? CP_GPU_PAGE_SIZE - 512 :
						      CP_GPU_PAGE_SIZE;
	}
	/* bug=sg_off_by_page: the last entry names the page after its own */
	if (CP_BUG(sg_off_by_page))
		sg_dma_address(sg_last(sg_head->sgl, map->entries)) += CP_GPU_PAGE_SIZE;
	return 0;
}

static int cp_dma_map(struct sg_table *sg_head, void *client_context,
		      struct device *dma_device, int dmasync, int *nmap)
{
	struct cp_ctx *ctx = client_context;
	struct nvidia_p2p_dma_mapping *map = NULL;
	struct nvidia_p2p_page_table *pt;
	struct pci_dev *pdev;
	int ret;

	if (!dma_device || (!CP_BUG(no_pci_check) && !dev_is_pci(dma_device))) {
		pr_err(CP_MODNAME ": dma_map: dma_device is not a PCI device\n");
		return -EINVAL;
	}
	pdev = to_pci_dev(dma_device);

	mutex_lock(&ctx->lock);
	if (ctx->state != CP_PINNED) {
		ret = ctx->state == CP_REVOKED ? -EFAULT : -EINVAL;
		mutex_unlock(&ctx->lock);
		return ret;
	}
	pt = ctx->page_table;
	if (pt->page_size != NVIDIA_P2P_PAGE_SIZE_64KB) {
		mutex_unlock(&ctx->lock);
		pr_err(CP_MODNAME ": page size index %u is not 64 KiB\n",
		       pt->page_size);
		return -EINVAL;
	}
	ctx->state = CP_MAPPING;
	mutex_unlock(&ctx->lock);

	ret = nvidia_p2p_dma_map_pages(pdev, pt, &map);

	mutex_lock(&ctx->lock);
	if (ctx->state == CP_REVOKED) {
		/* The provider tore the table (and any mapping) down. */
		mutex_unlock(&ctx->lock);
		return ret ? ret : -EFAULT;
	}
	if (ret) {
		ctx->state = CP_PINNED;
		mutex_unlock(&ctx->lock);
		return ret;
	}
	if (!NVIDIA_P2P_DMA_MAPPING_VERSION_COMPATIBLE(map)) {
		pr_err(CP_MODNAME ": incompatible dma mapping version 0x%08x\n",
		       map->version);
		ret = -EINVAL;
	} else {
		ret = cp_fill_sg(ctx, sg_head, map);
	}
	if (ret) {
		nvidia_p2p_dma_unmap_pages(pdev, pt, map);
		ctx->state = CP_PINNED;
		mutex_unlock(&ctx->lock);
		return ret;
	}
	ctx->dma_mapping = map;
	ctx->pdev = pdev;
	ctx->sg = *sg_head;
	ctx->sg_allocated = true;
	ctx->state = CP_MAPPED;
	*nmap = CP_BUG(bad_nmap) ? map->entries + 1 : map->entries;
	mutex_unlock(&ctx->lock);
	return 0;
}

static bool cp_same_sg(struct cp_ctx *ctx, struct sg_table *sg_head)
{
	if (!sg_head || !ctx->sg_allocated)
		return true;
	return sg_head->sgl == ctx->sg.sgl && sg_head->orig_nents == ctx->sg.orig_nents;
}

static int cp_dma_unmap(struct sg_table *sg_head, void *client_context,
			struct device *dma_device)
{
	struct cp_ctx *ctx = client_context;

	if (!ctx)
		return -EINVAL;
	/* Called by a legacy core from inside our own invalidate call. */
	if (!CP_BUG(unmap_in_callback) && READ_ONCE(ctx->callback_task) == current)
		return 0;

	if (CP_BUG(unmap_unserialized)) {
		/* No lock, no state check (hazard H2). */
		if (ctx->dma_mapping)
			nvidia_p2p_dma_unmap_pages(ctx->pdev, ctx->page_table,
						   ctx->dma_mapping);
		return 0;
	}

	mutex_lock(&ctx->lock);
	if (!cp_same_sg(ctx, sg_head)) {
		mutex_unlock(&ctx->lock);
		pr_err(CP_MODNAME ": dma_unmap: sg_table is not the one we mapped\n");
		return -EINVAL;
	}
	if (ctx->state == CP_MAPPED ||
	    (CP_BUG(unmap_in_callback) && ctx->state == CP_INVALIDATING)) {
		/* Takes no provider lock, so holding ours is safe (H2). */
		nvidia_p2p_dma_unmap_pages(ctx->pdev, ctx->page_table,
					   ctx->dma_mapping);
		if (ctx->state == CP_MAPPED)
			ctx->state = CP_UNMAPPED;
	}
	mutex_unlock(&ctx->lock);
	return 0;
}

static void cp_put_pages(struct sg_table *sg_head, void *client_context)
{
	struct cp_ctx *ctx = client_context;
	bool persistent, drop_ref = false;
	struct nvidia_p2p_page_table *pt;
	int ret = 0;

	if (!ctx)
		return;
	if (!CP_BUG(unmap_in_callback) && READ_ONCE(ctx->callback_task) == current)
		return;
	persistent = ctx->client->persistent;

	mutex_lock(&ctx->lock);
	if (!cp_same_sg(ctx, sg_head)) {
		mutex_unlock(&ctx->lock);
		pr_err(CP_MODNAME ": put_pages: sg_table is not the one we mapped\n");
		return;
	}
	switch (ctx->state) {
	case CP_PINNED:
	case CP_MAPPED:
	case CP_UNMAPPED:
		break;
	case CP_INVALIDATING:
		if (CP_BUG(legacy_deadlock) || CP_BUG(unmap_in_callback)) {
			/* No "callback in flight" check: unpin regardless. */
			pt = ctx->page_table;
			mutex_unlock(&ctx->lock);
			nvidia_p2p_put_pages(0, 0, ctx->va_start, pt);
			return;
		}
		fallthrough;
	default:
		/* Revoked, being revoked, or already unpinned: nothing to do. */
		mutex_unlock(&ctx->lock);
		return;
	}
	pt = ctx->page_table;
	if (!persistent && current->tgid != ctx->owner_tgid) {
		/*
		 * The provider looks non-persistent pins up by the calling
		 * process: from here it would find nothing and leave the pin
		 * and its callback in place.  Leave both to the callback, which
		 * holds its own reference to this context (H5).
		 */
		ctx->state = CP_ORPHANED;
		mutex_unlock(&ctx->lock);
		if (CP_BUG(wrong_process_put))
			nvidia_p2p_put_pages(0, 0, ctx->va_start, pt);
		return;
	}
	ctx->state = CP_UNPINNING;
	mutex_unlock(&ctx->lock);

	if (persistent) {
		if (!CP_BUG(leaked_pin))
			ret = nvidia_p2p_put_pages_persistent(ctx->va_start, pt, 0);
		if (ret)
			pr_err(CP_MODNAME ": put_pages_persistent failed: %d; pin leaked\n",
			       ret);
	} else {
		/*
		 * Waits for an in-flight callback; afterwards no callback can
		 * fire for this table.  Returns 0 when the callback already tore
		 * it down.
		 */
		ret = nvidia_p2p_put_pages(0, 0, ctx->va_start, pt);
	}

	mutex_lock(&ctx->lock);
	if (ctx->state == CP_UNPINNING) {
		if (ret && !persistent) {
			/*
			 * The pin may still be registered: keep the provider's
			 * reference so its callback finds a live context.
			 */
			ctx->state = CP_ORPHANED;
		} else {
			ctx->state = CP_UNPINNED;
			drop_ref = !persistent;	/* the callback will never run now */
		}
	}
	mutex_unlock(&ctx->lock);
	if (drop_ref)
		cp_ctx_put(ctx);

	if (CP_BUG(double_sg_free) && sg_head)
		sg_free_table(sg_head);
}

static unsigned long cp_get_page_size(void *client_context)
{
	return CP_GPU_PAGE_SIZE;
}

static void cp_release(void *client_context)
{
	struct cp_ctx *ctx = client_context;

	if (!ctx)
		return;
	mutex_lock(&ctx->lock);
	if (ctx->sg_allocated) {
		sg_free_table(&ctx->sg);
		ctx->sg_allocated = false;
	}
	mutex_unlock(&ctx->lock);
	cp_ctx_put(ctx);	/* the core's reference */
}

static void cp_fill_client(struct cp_client *c, const char *name, bool persistent)
{
	struct peer_memory_client *pc = &c->ex.client;

	memset(c, 0, sizeof(*c));
	c->persistent = persistent;
	strscpy(pc->name, name, sizeof(pc->name));
	strscpy(pc->version, CP_VERSION, sizeof(pc->version));
	pc->acquire = persistent ? cp_acquire_persist : cp_acquire_inval;
	pc->get_pages = cp_get_pages;
	pc->dma_map = CP_BUG(missing_op) ? NULL : cp_dma_map;
	pc->dma_unmap = cp_dma_unmap;
	pc->put_pages = cp_put_pages;
	pc->get_page_size = cp_get_page_size;
	pc->release = cp_release;
	if (!peerdirect_support && !CP_BUG(legacy_deadlock) &&
	    !CP_BUG(unmap_in_callback)) {
		/* Extended client: byte 15 of version marks the ex layout. */
		pc->version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		c->ex.ex_size = sizeof(c->ex);
		c->ex.flags = PEER_MEM_INVALIDATE_UNMAPS;
	}
}

static int cp_register(struct cp_client *c, const char *name, bool persistent)
{
	cp_fill_client(c, name, persistent);
	c->reg_handle = ib_register_peer_memory_client(&c->ex.client,
						       persistent ? NULL : &c->invalidate);
	if (!c->reg_handle) {
		pr_err(CP_MODNAME ": registering peer-memory client \"%s\" failed\n",
		       name);
		return -EINVAL;
	}
	return 0;
}

static void cp_unregister(struct cp_client *c)
{
	if (c->reg_handle)
		ib_unregister_peer_memory_client(c->reg_handle);
	c->reg_handle = NULL;
}

static int __init cp_init(void)
{
	int ret = CP_BAD_INIT();

	if (ret)
		return ret;
	if (persistent_api_support != 0 && persistent_api_support != 1) {
		pr_err(CP_MODNAME ": invalid persistent_api_support value %d\n",
		       persistent_api_support);
		return -EINVAL;
	}
	if (peerdirect_support != 0 && peerdirect_support != 1) {
		pr_err(CP_MODNAME ": invalid peerdirect_support value %d\n",
		       peerdirect_support);
		return -EINVAL;
	}
	if (persistent_api_support) {
		ret = cp_register(&cp_persist_client, "nv_mem", true);
	} else {
		ret = cp_register(&cp_inval_client, "nv_mem", false);
		if (!ret) {
			ret = cp_register(&cp_persist_client, "nv_mem_nc", true);
			if (ret)
				cp_unregister(&cp_inval_client);
		}
	}
	if (!ret && CP_BUG(mutate_client)) {
		/* Changes the registered struct behind the core's back. */
		cp_persist_client.ex.client.version[0] ^= 0x20;
		cp_inval_client.ex.client.version[0] ^= 0x20;
	}
	return ret;
}

static void __exit cp_exit(void)
{
	cp_unregister(&cp_inval_client);
	cp_unregister(&cp_persist_client);
}

module_init(cp_init);
module_exit(cp_exit);
MODULE_LICENSE("GPL");
MODULE_VERSION(CP_VERSION);
#ifndef CP_BAD_CLIENT
MODULE_DESCRIPTION("nvpeer test bench: correct minimal peer-memory client (classic call pattern)");
#endif
