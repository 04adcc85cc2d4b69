// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: ib_register_peer_memory_client / ib_unregister_peer_memory_client
 * (docs/emulators.md, "Peer-memory core emulator").
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include "pme.h"

/* The core's global mutex: client list, acquire, sysfs. */
DEFINE_MUTEX(pme_peer_memory_mutex);
LIST_HEAD(pme_clients);

/* Every handle ever returned, live or dead (see struct pme_client). */
static DEFINE_SPINLOCK(pme_handles_lock);
static LIST_HEAD(pme_all_handles);
static u64 pme_next_reg_id;

/*
 * Recompute what the client handed us and compare with the copy taken at
 * registration.  Returns false (and records a violation) on a change.
 */
bool pme_client_verify(struct pme_client *c)
{
	const u8 *now = (const u8 *)c->ops;
	size_t i;

	if (c->dead || c->zombie)
		return true;
	if (!memcmp(now, c->snapshot, c->snap_len))
		return true;
	for (i = 0; i < c->snap_len && now[i] == c->snapshot[i]; i++)
		;
	pme_violation(PME_R_CLIENT_MODIFIED,
		      "client %s changed its peer_memory_client struct at byte %zu while registered",
		      c->name, i);
	/* report once per change */
	memcpy(c->snapshot, now, c->snap_len);
	return false;
}

/*
 * Resolve a reg_handle given by a client.  Returns NULL for a pointer the
 * core never handed out; *dead tells whether it was unregistered already.
 */
struct pme_client *pme_client_get_checked(void *reg_handle, bool *dead)
{
	struct pme_client *c, *found = NULL;

	spin_lock(&pme_handles_lock);
	list_for_each_entry(c, &pme_all_handles, all_node) {
		if (c == reg_handle) {
			found = c;
			break;
		}
	}
	spin_unlock(&pme_handles_lock);
	*dead = found && READ_ONCE(found->dead);
	return found;
}

/* Drop one use (an acquired context, or the registration's own). */
void pme_client_put_use(struct pme_client *c)
{
	if (atomic_dec_and_test(&c->usecnt))
		complete(&c->unreg_done);
}

static const char *pme_missing_op(const struct peer_memory_client *p, u32 model)
{
	if (!p->acquire)
		return "acquire";
	if (!p->get_pages)
		return "get_pages";
	if (!p->put_pages)
		return "put_pages";
	if (!p->dma_map)
		return "dma_map";
	if (!p->dma_unmap)
		return "dma_unmap";
	/* OFED 4.x also demanded get_page_size; 5.x calls it unchecked. */
	if (pme_model(model)->page_size_mandatory && !p->get_page_size)
		return "get_page_size";
	return NULL;
}

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback)
{
	const struct peer_memory_client_ex *ex;
	struct pme_client *c;
	const char *missing;
	u32 model, cfg_flags;
	int ret;

	/*
	 * ib_register_peer_memory_client takes peer_memory_mutex, which the
	 * core holds only around the clients' acquire (ib_get_peer_client):
	 * from inside acquire it self-deadlocks, from any other callback it
	 * works (until 2026-12-02 recorded from every callback). Refused here
	 * instead of hanging the machine.
	 */
	if (pme_current_call() && !strcmp(pme_current_call()->op, "acquire")) {
		pme_violation(PME_R_REGISTER_IN_CALLBACK,
			      "%s called from inside acquire, which holds peer_memory_mutex (self-deadlock on a real core); refused",
			      __func__);
		goto rejected;
	}
	if (!peer_client) {
		pr_err("peer_mem_emu: NULL peer_memory_client\n");
		goto rejected;
	}
	mutex_lock(&pme_cfg_lock);
	model = pme_cfg.model;
	cfg_flags = pme_cfg.flags;
	mutex_unlock(&pme_cfg_lock);

	missing = pme_missing_op(peer_client, model);
	if (missing) {
		pr_err("peer_mem_emu: Peer memory %.*s is missing mandatory function %s\n",
		       IB_PEER_MEMORY_NAME_MAX, peer_client->name, missing);
		goto rejected;
	}
	if (pme_fault(PME_FP_CLIENT_ALLOC))
		goto rejected;
	c = kzalloc_obj(*c);
	if (!c)
		goto rejected;

	c->ops = peer_client;
	memcpy(c->name, peer_client->name, IB_PEER_MEMORY_NAME_MAX);
	memcpy(c->version, peer_client->version, IB_PEER_MEMORY_VER_MAX);
	/*
	 * Extended client (section 1.3): byte 15 of version set, then ex_size
	 * and flags are read.  Only then are the 16 bytes past the plain
	 * struct known to exist; the 4.9 view reads the same bytes as the
	 * private-data hooks.
	 */
	c->snap_len = sizeof(struct peer_memory_client);
	if (peer_client->version[IB_PEER_MEMORY_VER_MAX - 1]) {
		ex = container_of(peer_client, struct peer_memory_client_ex, client);
		c->snap_len = sizeof(struct peer_memory_client_ex);
		c->hooks49 = ex->ex_size || ex->flags;
		if (ex->ex_size >= offsetofend(struct peer_memory_client_ex, flags)) {
			c->ex = true;
			c->unmaps = ex->flags & PEER_MEM_INVALIDATE_UNMAPS;
		}
	}
	memcpy(c->snapshot, peer_client, c->snap_len);
	c->invalidating = invalidate_callback != NULL;
	atomic_set(&c->usecnt, 1);
	init_completion(&c->unreg_done);
	atomic64_set(&c->num_alloc_mrs, 0);
	xa_init_flags(&c->umem_xa, XA_FLAGS_ALLOC);
	mutex_init(&c->lock49);
	INIT_LIST_HEAD(&c->tickets49);
	c->next_ticket49 = 1;

	mutex_lock(&pme_peer_memory_mutex);
	/* DOCA-OFED on kernels without the mm_kobj export: no sysfs, no name check. */
	if ((cfg_flags & PME_CFG_SYSFS) && pme_model(model)->memory_peers && pme_sysfs_available()) {
		ret = pme_sysfs_add_client(c);
		if (ret) {
			mutex_unlock(&pme_peer_memory_mutex);
			if (ret == -EEXIST)
				pr_err("peer_mem_emu: client name %s already in /sys/kernel/mm/memory_peers\n",
				       c->name);
			else
				pr_err("peer_mem_emu: sysfs for client %s failed: %d\n",
				       c->name, ret);
			kfree(c);
			goto rejected;
		}
	}
	list_add_tail(&c->node, &pme_clients);
	c->in_list = true;
	spin_lock(&pme_handles_lock);
	c->reg_id = ++pme_next_reg_id;
	list_add_tail(&c->all_node, &pme_all_handles);
	spin_unlock(&pme_handles_lock);
	mutex_unlock(&pme_peer_memory_mutex);

	if (invalidate_callback)
		*invalidate_callback = pme_invalidate_peer_memory;
	atomic64_inc(&pme_cnt.live_clients);
	pr_info("peer_mem_emu: registered client %s version %.*s%s%s%s\n", c->name,
		IB_PEER_MEMORY_VER_MAX - 1, c->version,
		c->invalidating ? " invalidating" : " persistent",
		c->ex ? " ex" : "", c->unmaps ? " INVALIDATE_UNMAPS" : "");
	return c;

rejected:
	atomic64_inc(&pme_cnt.rejected_clients);
	return NULL;
}
EXPORT_SYMBOL(ib_register_peer_memory_client);

void ib_unregister_peer_memory_client(void *reg_handle)
{
	unsigned long timeout;
	struct pme_call *call;
	struct pme_client *c;
	bool dead;

	c = pme_client_get_checked(reg_handle, &dead);
	if (!c || dead || c->unregistering) {
		pme_violation(PME_R_UNREGISTER_BAD_HANDLE,
			      "%s(%p): %s", __func__, reg_handle,
			      !c ? "not a handle of this core" :
			      "client already unregistered");
		return;
	}
	call = pme_current_call();

	mutex_lock(&pme_peer_memory_mutex);
	c->unregistering = true;
	list_del(&c->node);
	c->in_list = false;
	pme_sysfs_del_client(c);
	mutex_unlock(&pme_peer_memory_mutex);

	pme_client_put_use(c);
	if (call) {
		/*
		 * The real core would sleep here until every context is
		 * released, which cannot happen while the caller sits in a
		 * callback.  Record it and wait at most the hang timeout.
		 */
		pme_violation(PME_R_UNREGISTER_IN_CALLBACK,
			      "client %s calls %s from inside %s (deadlock on a real core)",
			      c->name, __func__, call->op);
		timeout = msecs_to_jiffies(READ_ONCE(pme_cfg.hang_timeout_ms) ?: 1);
		if (!wait_for_completion_timeout(&c->unreg_done, timeout)) {
			pme_violation(PME_R_DEADLOCK,
				      "unregister of %s abandoned with %d live contexts; client left as zombie",
				      c->name, atomic_read(&c->usecnt));
			c->zombie = true;
			return;
		}
	} else {
		wait_for_completion(&c->unreg_done);
	}
	pme_client_verify(c);
	WRITE_ONCE(c->dead, true);
	atomic64_dec(&pme_cnt.live_clients);
	pr_info("peer_mem_emu: unregistered client %s\n", c->name);
}
EXPORT_SYMBOL(ib_unregister_peer_memory_client);

/* Module unload: clients that never unregistered are a violation. */
void pme_clients_cleanup(void)
{
	struct pme_client *c, *tmp;

	mutex_lock(&pme_peer_memory_mutex);
	list_for_each_entry(c, &pme_clients, node) {
		pme_violation(PME_R_LIVE_AT_UNLOAD,
			      "client %s still registered at peer_mem_emu unload", c->name);
		pme_sysfs_del_client(c);
	}
	mutex_unlock(&pme_peer_memory_mutex);
	list_for_each_entry_safe(c, tmp, &pme_all_handles, all_node) {
		list_del(&c->all_node);
		xa_destroy(&c->umem_xa);
		kfree(c);
	}
}
