// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P provider emulator: a minimal in-kernel test client.
 *
 * NVP2P_EMU_IOC_CLIENT lets a userspace test drive the exported API exactly
 * as a peer-memory client would (pin in the caller's process context, map for
 * a real PCI peer, unmap, put), and lets it misbehave on request, so the
 * provider's own checks can be tested without another module. It is a test
 * fixture: it follows the safe pattern (never holds its lock in the free
 * callback, put_pages is the barrier) unless a misbehaviour flag asks not to.
 */
#define pr_fmt(fmt) "nvp2p_emu: " fmt

#include <linux/kref.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/xarray.h>

#include "emu.h"

#define QEMU_EDU_VENDOR 0x1234
#define QEMU_EDU_DEVICE 0x11e8
#define PEER_FIRST_EDU  0xffffffffu

enum { CREC_PINNED, CREC_MAPPED, CREC_REVOKED, CREC_PT_DANGLING };

/*
 * One pin made by the test client.
 * Invariants: one reference belongs to the client's xarray (until CLOSE or
 * fd release), one more while CREC_PINNED is set (dropped by whoever clears
 * the bit: the free callback, or UNPIN once the provider no longer holds the
 * pin). `pt` and `map` are provider pointers and are only dereferenced under
 * emu.tbl_lock while the provider still has the pin live. `cb_ret` is what the
 * last NVIDIA call made by the free callback returned.
 */
struct emu_crec {
	struct kref ref;
	u32 id;
	u32 flags;
	u64 va, len;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *peer;
	atomic_t callbacks;
	int cb_ret;
	unsigned long state;
};

struct emu_client {
	struct mutex lock;
	struct xarray recs;
};

static void crec_release(struct kref *ref)
{
	struct emu_crec *r = container_of(ref, struct emu_crec, ref);

	pci_dev_put(r->peer);
	kfree(r);
}

static void crec_drop_pin(struct emu_crec *r)
{
	if (test_and_clear_bit(CREC_PINNED, &r->state))
		kref_put(&r->ref, crec_release);
}

/* The free callback: runs on the freeing thread with the RM lock held. */
static void crec_free_callback(void *data)
{
	struct emu_crec *r = data;

	/* A pin made with NULL data (F_NULL_DATA): nothing to find. */
	if (!r)
		return;
	atomic_inc(&r->callbacks);
	if ((r->flags & NVP2P_EMU_CLIENT_F_UNMAP_IN_CB) &&
	    test_and_clear_bit(CREC_MAPPED, &r->state))
		WRITE_ONCE(r->cb_ret, nvidia_p2p_dma_unmap_pages(r->peer, r->pt, r->map));
	if (r->flags & NVP2P_EMU_CLIENT_F_PUT_IN_CB)
		WRITE_ONCE(r->cb_ret, nvidia_p2p_put_pages(0, 0, r->va, r->pt));
	if (r->flags & NVP2P_EMU_CLIENT_F_FREE_IN_CB) {
		if (test_bit(CREC_MAPPED, &r->state))
			nvidia_p2p_free_dma_mapping(r->map);
		nvidia_p2p_free_page_table(r->pt);
	}
	clear_bit(CREC_MAPPED, &r->state);
	set_bit(CREC_REVOKED, &r->state);
	crec_drop_pin(r);
}

struct emu_client *emu_client_create(void)
{
	struct emu_client *c = kzalloc_obj(*c);

	if (!c)
		return NULL;
	mutex_init(&c->lock);
	xa_init_flags(&c->recs, XA_FLAGS_ALLOC1);
	return c;
}

/* Does the provider still hold the pin r made? */
static bool crec_provider_live(struct emu_crec *r)
{
	struct emu_pin *p;
	bool live;

	mutex_lock(&emu.tbl_lock);
	p = emu_pin_lookup(r->pt);
	live = p && (p->persistent || p->data == r);
	mutex_unlock(&emu.tbl_lock);
	return live;
}

static void crec_snapshot(struct emu_crec *r, struct nvp2p_emu_client *req)
{
	struct emu_pin *p;

	req->callbacks = atomic_read(&r->callbacks);
	req->state = r->state & 0xf;
	req->pt_version = req->pt_entries = req->pt_page_size = req->pt_flags = 0;
	req->phys0 = req->phys1 = 0;
	req->map_version = req->map_entries = 0;
	req->dma0 = req->dma1 = 0;
	mutex_lock(&emu.tbl_lock);
	p = r->pt ? emu_pin_lookup(r->pt) : NULL;
	if (p && (p->persistent || p->data == r)) {
		struct emu_map *mp;

		req->pt_version = r->pt->version;
		req->pt_entries = r->pt->entries;
		req->pt_page_size = r->pt->page_size;
		req->pt_flags = (r->pt->version >> 16) >= 2 ? r->pt->flags : 0;
		req->phys0 = r->pt->pages[0]->physical_address;
		if (r->pt->entries > 1)
			req->phys1 = r->pt->pages[1]->physical_address;
		list_for_each_entry(mp, &p->maps, node) {
			if (mp->m != r->map)
				continue;
			req->map_version = r->map->version;
			req->map_entries = r->map->entries;
			req->dma0 = r->map->dma_addresses[0];
			if (r->map->entries > 1)
				req->dma1 = r->map->dma_addresses[1];
		}
	}
	mutex_unlock(&emu.tbl_lock);
}

static struct pci_dev *find_peer(u32 bdf, u32 domain)
{
	if (bdf == PEER_FIRST_EDU)
		return pci_get_device(QEMU_EDU_VENDOR, QEMU_EDU_DEVICE, NULL);
	if (bdf > 0xffff)
		return NULL;
	return pci_get_domain_bus_and_slot(domain, bdf >> 8, bdf & 0xff);
}

/* Any PCI device other than peer (for the wrong-peer misbehaviour). */
static struct pci_dev *other_peer(struct pci_dev *peer)
{
	struct pci_dev *d = NULL;

	while ((d = pci_get_device(PCI_ANY_ID, PCI_ANY_ID, d)))
		if (d != peer)
			return d;
	return NULL;
}

static int op_pin(struct emu_client *c, struct nvp2p_emu_client *req)
{
	struct emu_crec *r;
	u64 token = 0;
	u32 va_space = 0;
	int ret;

	if ((req->flags & NVP2P_EMU_CLIENT_F_TOKEN) &&
	    emu_alloc_token(current->tgid, req->va, &token, &va_space))
		return -EINVAL;
	r = kzalloc_obj(*r);
	if (!r)
		return -ENOMEM;
	kref_init(&r->ref);
	r->flags = req->flags;
	r->va = req->va;
	r->len = req->len;
	ret = xa_alloc(&c->recs, &r->id, r, xa_limit_31b, GFP_KERNEL);
	if (ret) {
		kfree(r);
		return ret;
	}
	/* The pin's reference, before the callback can possibly run. */
	kref_get(&r->ref);
	set_bit(CREC_PINNED, &r->state);
	if (req->flags & NVP2P_EMU_CLIENT_F_PERSISTENT) {
		u32 fl = (req->flags & NVP2P_EMU_CLIENT_F_FORCE_BAR1) ?
			 NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING : 0;

		if (req->flags & NVP2P_EMU_CLIENT_F_ODD_FLAGS)
			fl |= 0x1fe;

		ret = nvidia_p2p_get_pages_persistent(req->va, req->len, &r->pt, fl);
	} else {
		ret = nvidia_p2p_get_pages(token, va_space, req->va, req->len, &r->pt,
					   (req->flags & NVP2P_EMU_CLIENT_F_NULL_CB) ?
					   NULL : crec_free_callback,
					   (req->flags & NVP2P_EMU_CLIENT_F_NULL_DATA) ?
					   NULL : r);
	}
	if (ret) {
		/* What the failed call left in *page_table (r->pt was NULL before). */
		if (r->pt)
			set_bit(CREC_PT_DANGLING, &r->state);
		if (!(req->flags & NVP2P_EMU_CLIENT_F_KEEP_FAILED_PT))
			r->pt = NULL;
		crec_drop_pin(r);
	}
	req->ret = ret;
	req->handle = r->id;
	crec_snapshot(r, req);
	return 0;
}

static int op_map(struct emu_crec *r, struct nvp2p_emu_client *req)
{
	struct pci_dev *peer;
	int ret;

	if (!r->pt || test_bit(CREC_MAPPED, &r->state))
		return -EINVAL;
	peer = find_peer(req->peer_bdf, req->peer_domain);
	if (!peer)
		return -ENODEV;
	ret = nvidia_p2p_dma_map_pages(peer, r->pt, &r->map);
	if (ret) {
		pci_dev_put(peer);
	} else {
		pci_dev_put(r->peer);
		r->peer = peer;
		set_bit(CREC_MAPPED, &r->state);
	}
	req->ret = ret;
	return 0;
}

static int op_unmap(struct emu_crec *r, struct nvp2p_emu_client *req)
{
	struct pci_dev *peer, *other = NULL;

	if (!r->map || !r->peer)
		return -EINVAL;
	peer = r->peer;
	if (req->flags & NVP2P_EMU_CLIENT_F_WRONG_PEER) {
		other = other_peer(r->peer);
		if (!other)
			return -ENODEV;
		peer = other;
	}
	req->ret = nvidia_p2p_dma_unmap_pages(peer, r->pt, r->map);
	pci_dev_put(other);
	clear_bit(CREC_MAPPED, &r->state);
	return 0;
}

static int op_unpin(struct emu_crec *r, struct nvp2p_emu_client *req)
{
	if (!r->pt)
		return -EINVAL;
	if (req->flags & NVP2P_EMU_CLIENT_F_PUT_WRONG_VA)
		req->ret = nvidia_p2p_put_pages(0, 0, r->va + EMU_GPU_PAGE_SIZE, r->pt);
	else if (req->flags & NVP2P_EMU_CLIENT_F_PUT_NONPERSISTENT)
		req->ret = nvidia_p2p_put_pages(0, 0, r->va, r->pt);
	else if ((r->flags & NVP2P_EMU_CLIENT_F_PERSISTENT) ||
		 (req->flags & NVP2P_EMU_CLIENT_F_PUT_PERSISTENT))
		req->ret = nvidia_p2p_put_pages_persistent(r->va, r->pt, 0);
	else
		req->ret = nvidia_p2p_put_pages(0, 0, r->va, r->pt);
	/* put_pages is the barrier: the callback has run or never will. */
	if (!crec_provider_live(r)) {
		clear_bit(CREC_MAPPED, &r->state);
		crec_drop_pin(r);
	}
	return 0;
}

/* Release what r still holds and forget it; under c->lock. */
static void crec_close(struct emu_client *c, struct emu_crec *r)
{
	struct nvp2p_emu_client scratch = {};

	if (test_bit(CREC_PINNED, &r->state) && test_bit(CREC_MAPPED, &r->state))
		op_unmap(r, &scratch);
	if (test_bit(CREC_PINNED, &r->state))
		op_unpin(r, &scratch);
	xa_erase(&c->recs, r->id);
	/*
	 * If a wrong-process put left the pin live, the pin reference keeps
	 * r alive for its callback.
	 */
	kref_put(&r->ref, crec_release);
}

int emu_client_ioctl(struct emu_client *c, struct nvp2p_emu_client *req)
{
	struct emu_crec *r;
	int ret;

	if (req->pad || (req->flags & ~NVP2P_EMU_CLIENT_F_ALL) ||
	    req->op > NVP2P_EMU_CLIENT_CLOSE)
		return -EINVAL;
	req->ret = 0;
	mutex_lock(&c->lock);
	if (req->op == NVP2P_EMU_CLIENT_PIN) {
		ret = op_pin(c, req);
		goto out;
	}
	r = req->handle <= U32_MAX ? xa_load(&c->recs, req->handle) : NULL;
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	switch (req->op) {
	case NVP2P_EMU_CLIENT_MAP:
		ret = op_map(r, req);
		break;
	case NVP2P_EMU_CLIENT_UNMAP:
		ret = op_unmap(r, req);
		break;
	case NVP2P_EMU_CLIENT_UNPIN:
		ret = op_unpin(r, req);
		break;
	case NVP2P_EMU_CLIENT_CLOSE:
		crec_close(c, r);
		ret = 0;
		goto out;
	default:
		ret = 0;
		break;
	}
	if (!ret && req->op == NVP2P_EMU_CLIENT_STATUS)
		req->ret = READ_ONCE(r->cb_ret);
	if (!ret)
		crec_snapshot(r, req);
out:
	mutex_unlock(&c->lock);
	return ret;
}

void emu_client_destroy(struct emu_client *c)
{
	struct emu_crec *r;
	unsigned long id;

	mutex_lock(&c->lock);
	xa_for_each(&c->recs, id, r)
		crec_close(c, r);
	mutex_unlock(&c->lock);
	xa_destroy(&c->recs);
	kfree(c);
}
