// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: deregistration, ib_umem_stop_invalidation_notifier,
 * ib_peer_umem_release and the invalidate entry point handed to clients
 * (docs/emulators.md, "OFED models"), per emulated OFED model.
 */
#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/ktime.h>
#include <linux/preempt.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include "pme.h"

/*
 * Take mapping_lock.  With detect (paths that a client callback drives, i.e.
 * invalidate), a wait longer than the hang timeout is recorded as a deadlock
 * and abandoned (returns false) instead of hanging the machine.  That wait is
 * a trylock loop, invisible to lockdep, unless PME_CFG_LOCKDEP_INVAL asks for
 * a might_lock() annotation: then lockdep reports the provider-lock ->
 * mapping_lock -> provider-lock cycle that every real OFED + NVIDIA pairing
 * has (hazard H4) as soon as both orders were seen, and turns itself off for
 * the rest of the boot.
 */
bool pme_lock_mapping(struct pme_mr *mr, const char *step, bool detect)
{
	u32 ms = READ_ONCE(pme_cfg.hang_timeout_ms);
	unsigned long deadline;

	if (!detect || !ms) {
		mutex_lock(&mr->mapping_lock);
		goto owned;
	}
	if (READ_ONCE(pme_cfg.flags) & PME_CFG_LOCKDEP_INVAL)
		might_lock(&mr->mapping_lock);
	deadline = jiffies + msecs_to_jiffies(ms);
	while (!mutex_trylock(&mr->mapping_lock)) {
		if (time_after(jiffies, deadline)) {
			struct task_struct *holder = READ_ONCE(mr->lock_owner);

			pme_violation(PME_R_DEADLOCK,
				      "%s waited %u ms for mapping_lock of MR %u held by pid %d in %s (lock inversion, e.g. OFED #2696789 / hazard H4); call abandoned",
				      step, ms, mr->handle,
				      holder ? task_pid_nr(holder) : -1,
				      READ_ONCE(mr->lock_step) ?: "?");
			return false;
		}
		usleep_range(500, 1000);
	}
owned:
	WRITE_ONCE(mr->lock_owner, current);
	WRITE_ONCE(mr->lock_step, step);
	return true;
}

void pme_unlock_mapping(struct pme_mr *mr)
{
	WRITE_ONCE(mr->lock_owner, NULL);
	WRITE_ONCE(mr->lock_step, NULL);
	mutex_unlock(&mr->mapping_lock);
}

/* The fake HCA stops DMA (mlx5: UMR revoke of the mkey). */
void pme_hw_revoke(struct pme_mr *mr)
{
	if (READ_ONCE(mr->revoked))
		return;
	WRITE_ONCE(mr->dma_stopped_ns, ktime_get_ns());
	/* 4.9: a dereg and an invalidation of the same MR may both revoke; count it once */
	if (xchg(&mr->revoked, true))
		return;
	atomic64_inc(&pme_cnt.hw_revokes);
}

static void pme_restore_sgl(struct pme_mr *mr)
{
	if (!mr->trimmed)
		return;
	sg_dma_address(mr->trim_first) = mr->orig_first_addr;
	sg_dma_len(mr->trim_first) = mr->orig_first_dlen;
	mr->trim_first->length = mr->orig_first_len;
	sg_dma_len(mr->trim_last) = mr->orig_last_dlen;
	mr->trim_last->length = mr->orig_last_len;
	mr->trimmed = false;
}

static void pme_check_sg_unchanged(struct pme_mr *mr)
{
	if (mr->sgt.sgl != mr->sgt_seen.sgl || mr->sgt.nents != mr->sgt_seen.nents ||
	    mr->sgt.orig_nents != mr->sgt_seen.orig_nents) {
		pme_violation(PME_R_SG_MODIFIED,
			      "client %s: sg_table header of MR %u changed while mapped",
			      mr->client->name, mr->handle);
		return;
	}
	if (mr->sgt.sgl && mr->nmap && pme_sg_hash(&mr->sgt, mr->nmap) != mr->sg_hash)
		pme_violation(PME_R_SG_MODIFIED,
			      "client %s: sg entries of MR %u changed while mapped",
			      mr->client->name, mr->handle);
}

/*
 * The core's unmap of a MAPPED umem: hand the restored table to dma_unmap
 * and put_pages, update the statistics, move to to_state.
 */
void pme_unmap_peer(struct pme_mr *mr, u32 to_state)
{
	struct pme_client *c = mr->client;
	bool strict = mr->cfg_flags & PME_CFG_STRICT_SG;
	struct pme_call call;
	u32 nents;

	pme_check_sg_unchanged(mr);
	pme_restore_sgl(mr);
	nents = mr->sgt.nents;

	pme_call_enter(&call, c, mr, "dma_unmap");
	c->ops->dma_unmap(&mr->sgt, mr->ctx, mr->dma_dev);
	pme_call_exit(&call);
	mr->n_dma_unmap++;
	if (strict && mr->sgt_seen.sgl && !mr->sgt.sgl)
		pme_violation(PME_R_SG_NOT_FREED,
			      "client %s freed the sg_table of MR %u in dma_unmap; put_pages still needs it",
			      c->name, mr->handle);

	pme_call_enter(&call, c, mr, "put_pages");
	c->ops->put_pages(&mr->sgt, mr->ctx);
	pme_call_exit(&call);
	mr->n_put_pages++;
	if (strict && mr->sgt.sgl)
		pme_violation(PME_R_SG_NOT_FREED,
			      "client %s did not free the sg_table of MR %u in put_pages (header rule; hazard H9: freeing it in release is tolerated when STRICT_SG is off)",
			      c->name, mr->handle);

	/* OFED zeroes the table before reading nents for the statistics. */
	memset(&mr->sgt, 0, sizeof(mr->sgt));
	atomic64_inc(&c->num_dealloc_mrs);
	atomic64_add(mr->len, &c->num_dereg_bytes);
	atomic64_add((mr->cfg_flags & PME_CFG_DEREG_PAGES_QUIRK) ? mr->sgt.nents : nents,
		     &c->num_dereg_pages);
	WRITE_ONCE(mr->state, to_state);
}

/*
 * ib_umem_stop_invalidation_notifier.  Called with mapping_lock held by the
 * caller when the registration never reached activation (held_by_reg).
 */
static void pme_stop_notifier(struct pme_mr *mr, bool held_by_reg)
{
	bool bug = (mr->cfg_flags & PME_CFG_STOP_NOTIFIER_BUG) &&
		   pme_model(mr->model)->stop_notifier_bug;
	bool need_lock, locked = held_by_reg;
	u32 snapshot;

	if (bug)
		need_lock = mr->invalidating;	/* pre-25.04 condition */
	else
		need_lock = !held_by_reg;
	if (need_lock) {
		if (held_by_reg) {
			pme_violation(PME_R_CORE_RELOCK,
				      "MR %u: stop_invalidation_notifier re-locks the mapping_lock the failed registration still holds (pre-25.04 OFED self-deadlock); continuing without it",
				      mr->handle);
			pme_core_bug("stop-notifier relock on MR %u", mr->handle);
		} else {
			pme_lock_mapping(mr, "stop_invalidation_notifier", false);
			locked = true;
		}
	}
	mr->activated = false;
	mr->stopped = true;

	if (!mr->unmaps) {
		/* legacy client: unmap under mapping_lock (#2696789 side) */
		if (mr->state == PME_ST_MAPPED) {
			pme_delay(PME_DP_IN_STOP);
			pme_unmap_peer(mr, PME_ST_UNMAPPED);
		}
	} else {
		snapshot = mr->state;
		if (snapshot == PME_ST_MAPPED || snapshot == PME_ST_INVALIDATED)
			WRITE_ONCE(mr->state, PME_ST_UNMAPPED);
		if (locked)
			pme_unlock_mapping(mr);
		else if (bug)
			pme_core_bug("MR %u: stop_invalidation_notifier unlocks a mapping_lock it never took (pre-25.04 OFED); skipped",
				     mr->handle);
		locked = false;
		pme_delay(PME_DP_IN_STOP);
		if (snapshot == PME_ST_MAPPED)
			pme_unmap_peer(mr, PME_ST_UNMAPPED);
		return;
	}
	if (locked)
		pme_unlock_mapping(mr);
	else if (bug)
		pme_core_bug("MR %u: stop_invalidation_notifier unlocks a mapping_lock it never took (pre-25.04 OFED); skipped",
			     mr->handle);
}

/* release() (optional op) + drop the client use taken at acquire. */
void pme_release_ctx(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;
	struct pme_call call;

	if (mr->released) {
		pme_violation(PME_R_CORE_INTERNAL, "MR %u released twice", mr->handle);
		return;
	}
	if (c->ops->release) {
		pme_call_enter(&call, c, mr, "release");
		c->ops->release(mr->ctx);
		pme_call_exit(&call);
	}
	mr->released = true;
	mr->n_release++;
	atomic64_inc(&pme_cnt.releases);
	pme_probe_untrack(mr);
	pme_client_put_use(c);
}

/* Section 5.2: the core's own accounting per MR at the end of its life. */
static void pme_check_mr_invariants(struct pme_mr *mr)
{
	bool invalidated_unmaps = mr->unmaps && mr->n_dma_unmap == 0 &&
				  mr->invalidations > 0;

	if (mr->n_release != 1)
		pme_violation(PME_R_CORE_INTERNAL, "MR %u: %d release() calls for one acquire",
			      mr->handle, mr->n_release);
	if (mr->n_dma_map_ok && mr->n_dma_unmap != 1 && !invalidated_unmaps)
		pme_violation(PME_R_CORE_INTERNAL,
			      "MR %u: dma_map succeeded, %d dma_unmap calls", mr->handle,
			      mr->n_dma_unmap);
	if (mr->n_dma_unmap != mr->n_put_pages)
		pme_violation(PME_R_CORE_INTERNAL, "MR %u: %d dma_unmap vs %d put_pages",
			      mr->handle, mr->n_dma_unmap, mr->n_put_pages);
}

/* ib_peer_umem_release: everything after stop. */
void pme_peer_release(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;

	if (mr->activated)
		pme_violation(PME_R_CORE_INTERNAL,
			      "MR %u released while its invalidation notifier is active",
			      mr->handle);
	if (!mr->invalidating && mr->state == PME_ST_MAPPED) {
		pme_lock_mapping(mr, "release", false);
		pme_unmap_peer(mr, PME_ST_UNMAPPED);
		pme_unlock_mapping(mr);
	}
	if (mr->xa_id != PME_NO_INVALIDATION_ID)
		xa_erase(&c->umem_xa, mr->xa_id);
	pme_release_ctx(mr);
	pme_check_mr_invariants(mr);
}

/* 4.9: dma_unmap + put_pages + release of the whole MR (mlx5 dereg). */
static void pme_teardown_49(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;

	pme_hw_revoke(mr);
	if (mr->state == PME_ST_MAPPED) {
		pme_unmap_peer(mr, PME_ST_UNMAPPED);
		/* 4.x counted dereg in release, in aligned bytes */
		atomic64_sub(mr->len, &c->num_dereg_bytes);
		atomic64_add((u64)mr->nmap << mr->page_shift, &c->num_dereg_bytes);
	}
	pme_release_ctx(mr);
	pme_check_mr_invariants(mr);
	mr->torn_down = true;
}

/* Error path after a successful map: the HCA object could not be created. */
void pme_mr_fail_after_map(struct pme_mr *mr)
{
	if (pme_model(mr->model)->tickets) {
		if (mr->on_ticket_list) {
			mutex_lock(&mr->client->lock49);
			list_del(&mr->ticket_node);
			mr->on_ticket_list = false;
			mutex_unlock(&mr->client->lock49);
		}
		pme_teardown_49(mr);
		return;
	}
	/* mlx5 calls stop for every peer umem on this path */
	pme_stop_notifier(mr, mr->invalidating);
	pme_delay(PME_DP_STOP_TO_RELEASE);
	pme_peer_release(mr);
}

static void pme_dereg_49(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;
	bool inflight;

	/* mlx5 4.x, as 5.x: the mkey is destroyed first, then the umem's ticket is dropped */
	pme_hw_revoke(mr);
	pme_delay(PME_DP_DEREG_BEFORE_STOP);
	mutex_lock(&c->lock49);
	if (mr->on_ticket_list) {
		list_del(&mr->ticket_node);
		mr->on_ticket_list = false;
	}
	inflight = mr->inflight49;
	mutex_unlock(&c->lock49);
	if (inflight) {
		/* the invalidating thread deregisters the MR; wait for it */
		wait_for_completion(&mr->inval49_done);
		return;
	}
	pme_teardown_49(mr);
}

/* Deregistration of a committed MR (ibv_dereg_mr / uverbs teardown). */
void pme_mr_destroy(struct pme_mr *mr)
{
	if (!mr->is_peer) {
		unpin_user_pages_dirty_lock(mr->pages, mr->npinned, mr->writable);
		mr->npinned = 0;
	} else if (pme_model(mr->model)->tickets) {
		pme_dereg_49(mr);
	} else {
		/*
		 * mlx5: revoke the mkey, stop the notifier, destroy, release.
		 * From 5.4-3 on (mlx5r_handle_mkey_cleanup in DOCA 3.2.1) the
		 * stop is called for every peer umem, a persistent one too,
		 * whose stop takes mapping_lock and unmaps there (before
		 * 2026-12-02 the emulator stopped invalidating umems only and
		 * unmapped persistent ones in release); 5.1 has no stop.
		 */
		pme_hw_revoke(mr);
		pme_delay(PME_DP_DEREG_BEFORE_STOP);
		if (mr->invalidating || mr->model != PME_MODEL_5_1)
			pme_stop_notifier(mr, false);
		pme_delay(PME_DP_STOP_TO_RELEASE);
		pme_peer_release(mr);
	}
	if (mr->mm && mr->npages)
		atomic64_sub(mr->npages, &mr->mm->pinned_vm);
	mr->npages = 0;
	atomic64_dec(&pme_cnt.live_mrs);
	atomic64_inc(&pme_cnt.deregs);
}

/* ---- invalidate entry point ---- */

static int pme_invalidate_49(struct pme_client *c, u64 ticket)
{
	struct pme_mr *mr, *found = NULL;

	mutex_lock(&c->lock49);
	c->num_free_callbacks++;
	list_for_each_entry(mr, &c->tickets49, ticket_node) {
		if (mr->ticket49 == ticket) {
			found = mr;
			break;
		}
	}
	if (!found) {
		mutex_unlock(&c->lock49);
		atomic64_inc(&pme_cnt.invalidate_unknown);
		return 0;
	}
	found->invalidations++;
	if (found->inflight49) {
		/* already being deregistered by an earlier invalidation */
		mutex_unlock(&c->lock49);
		return 0;
	}
	if (!found->activated) {
		/* before activation: only marked; activation will fail */
		found->inval_before_act = true;
		mutex_unlock(&c->lock49);
		return 0;
	}
	found->inflight49 = true;
	kref_get(&found->ref);
	mutex_unlock(&c->lock49);

	pme_delay(PME_DP_INVALIDATE_LOCKED);
	/* mlx5 4.x: the HCA's invalidation deregisters the MR synchronously */
	pme_teardown_49(found);
	WRITE_ONCE(found->state, PME_ST_TORN_DOWN);
	complete(&found->inval49_done);
	pme_mr_put(found);
	return 0;
}

/*
 * The planted inversion (PME_CFG_ACQUIRE_IN_INVAL): no real core does this. A core
 * that asked a client for a registration from inside invalidate would do it with
 * the provider's lock held (the free callback's), and a client whose pin waits for
 * calls that need that lock (nvpeer's wait for overtaken calls) would then wait on
 * itself. lockdep must report the cycle; the provider refuses the pin (-EIO), so the
 * acquire declines and nothing is left behind.
 */
static void pme_planted_acquire(struct pme_client *c, struct pme_mr *mr)
{
	void *ctx = NULL;

	if (!(READ_ONCE(pme_cfg.flags) & PME_CFG_ACQUIRE_IN_INVAL))
		return;
	pr_info("peer_mem_emu: planted acquire from invalidate: client %s, MR %u\n",
		c->name, mr->handle);
	if (c->ops->acquire(mr->addr, mr->len, NULL, NULL, &ctx) > 0)
		c->ops->release(ctx);
}

int pme_invalidate_peer_memory(void *reg_handle, u64 core_context)
{
	struct pme_call *call;
	struct pme_client *c;
	struct pme_mr *mr;
	bool dead;

	c = pme_client_get_checked(reg_handle, &dead);
	if (!c || dead) {
		pme_violation(PME_R_INVALIDATE_BAD_HANDLE,
			      "invalidate(%p, %llu): %s", reg_handle, core_context,
			      c ? "client already unregistered" :
			      "not a reg_handle of this core");
		return 0;
	}
	if (!c->invalidating)
		pme_violation(PME_R_INVALIDATE_NONINV,
			      "invalidate called with the handle of client %s, registered without an invalidate callback",
			      c->name);
	if (in_atomic() || irqs_disabled()) {
		pme_violation(PME_R_INVALIDATE_ATOMIC,
			      "client %s calls invalidate from atomic context", c->name);
		return 0;
	}
	atomic64_inc(&pme_cnt.invalidate_calls);
	/* the model cannot change while MRs exist */
	if (pme_model(READ_ONCE(pme_cfg.model))->tickets)
		return pme_invalidate_49(c, core_context);

	xa_lock(&c->umem_xa);
	c->num_free_callbacks++;
	mr = core_context < PME_NO_INVALIDATION_ID ?
		xa_load(&c->umem_xa, core_context) : NULL;
	if (mr)
		kref_get(&mr->ref);
	xa_unlock(&c->umem_xa);
	if (!mr) {
		atomic64_inc(&pme_cnt.invalidate_unknown);
		return 0;
	}

	pme_planted_acquire(c, mr);
	call = pme_current_call();
	if (READ_ONCE(mr->lock_owner) == current) {
		pme_violation(PME_R_INVALIDATE_IN_CALLBACK,
			      "client %s calls invalidate for MR %u from inside %s while the core holds that MR's mapping_lock (self-deadlock)",
			      c->name, mr->handle, call ? call->op : "a core path");
		pme_mr_put(mr);
		return 0;
	}
	if (!pme_lock_mapping(mr, "invalidate", true)) {
		pme_mr_put(mr);
		return 0;
	}
	/*
	 * The real ib_invalidate_peer_memory goes on to read umem_p->ib_peer_client, whatever the
	 * state. ib_peer_umem_release never takes mapping_lock and stores NULL there; if it ran
	 * while this invalidate waited (the registration failed before activation, or was torn
	 * down), every xarray core (5.1 through DOCA 3.x) dereferences NULL here. No client can
	 * prevent it; only a persistent client never gets here. Counted as a core defect.
	 */
	if (!pme_model(mr->model)->tickets && READ_ONCE(mr->released)) {
		pme_core_bug("MR %u: invalidate after ib_peer_umem_release cleared ib_peer_client (the real core dereferences NULL here)",
			     mr->handle);
		pme_unlock_mapping(mr);
		pme_mr_put(mr);
		return 0;
	}
	pme_delay(PME_DP_INVALIDATE_LOCKED);
	mr->invalidations++;
	if (mr->state == PME_ST_MAPPED && mr->activated)
		pme_hw_revoke(mr);
	if (mr->state == PME_ST_MAPPED) {
		if (mr->unmaps) {
			/*
			 * ib_unmap_peer_client to INVALIDATED: the client unmaps
			 * by itself, yet the core restores the trim and zeroes
			 * the umem's sg header all the same. A client that frees
			 * or reads its table through that header afterwards (in
			 * release, say) finds it empty, as on the real core.
			 * (No check of the entries here: the client's own unmap
			 * ran before this call and may have touched them.)
			 */
			pme_restore_sgl(mr);
			memset(&mr->sgt, 0, sizeof(mr->sgt));
			WRITE_ONCE(mr->state, PME_ST_INVALIDATED);
			atomic64_inc(&c->num_dealloc_mrs);
		} else {
			pme_unmap_peer(mr, PME_ST_UNMAPPED);
		}
	}
	pme_unlock_mapping(mr);
	pme_mr_put(mr);
	return 0;
}
