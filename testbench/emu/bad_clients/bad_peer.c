// SPDX-License-Identifier: GPL-2.0
/*
 * bad_peer: the classic_peer client with exactly one rule broken, chosen by
 * the `bug=` parameter.  A test fixture that proves the emulators (or
 * KASAN/lockdep) catch each class of client bug of docs/design.md's hazards and
 * hazards H1-H6.  Never load it outside the test bench.
 *
 *   put_in_callback     nvidia_p2p_put_pages from inside the free callback
 *   unmap_in_callback   legacy client without the callback_task check: the
 *                       core's invalidate makes it dma_unmap/put inside the
 *                       callback (nv_peer_mem issue #13)
 *   unaligned           range not widened to 64 KiB GPU pages
 *   double_sg_free      sg_table freed in put_pages and again in release
 *   write_after_release callback writes its context after invalidate
 *                       returned without holding a reference (H1)
 *   no_pci_check        to_pci_dev() without dev_is_pci() (H6)
 *   legacy_deadlock     legacy client that unpins while its callback is in
 *                       flight: OFED 5.1-5.4 lock inversion (#2696789)
 *   unmap_unserialized  dma_unmap not serialized against the callback (H2)
 *   wrong_process_put   put_pages from a process other than the pinning one (H5)
 *   leaked_pin          persistent pin never released
 *   mutate_client       registered peer_memory_client changed afterwards
 *   missing_op          dma_map left NULL at registration
 *   bad_sg_len          SG entries that are not whole pages
 *   bad_nmap            *nmap larger than the table dma_map built
 *   no_invalidate       free callback returns without telling the core to
 *                       invalidate: the HCA keeps DMA to freed GPU memory
 *   sg_off_by_page      the last SG entry names the DMA address of the page
 *                       after its own (the fake HCA checks every entry
 *                       against the provider's mapping)
 */
#include <linux/module.h>
#include <linux/string.h>

#define CP_BAD_CLIENT 1
#define CP_MODNAME "bad_peer"

#define CP_BUG_LIST(X) \
	X(put_in_callback) X(unmap_in_callback) X(unaligned) X(double_sg_free) \
	X(write_after_release) X(no_pci_check) X(legacy_deadlock) \
	X(unmap_unserialized) X(wrong_process_put) X(leaked_pin) \
	X(mutate_client) X(missing_op) X(bad_sg_len) X(bad_nmap) \
	X(no_invalidate) X(sg_off_by_page)

#define CP_BUG_ENUM(n) CP_BUG_ID_##n,
enum { CP_BUG_ID_none, CP_BUG_LIST(CP_BUG_ENUM) };
#define CP_BUG_NAME(n) \
	[CP_BUG_ID_##n] = #n,
static const char *const cp_bug_names[] = {
	[CP_BUG_ID_none] = "none", CP_BUG_LIST(CP_BUG_NAME)
};

static char *bug = "none";
module_param(bug, charp, 0444);
MODULE_PARM_DESC(bug, "which rule to break (see the module source header)");

static int cp_bug_id;

#define CP_BUG(name) (cp_bug_id == CP_BUG_ID_##name)

static int cp_bad_init(void)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(cp_bug_names); i++) {
		if (sysfs_streq(bug, cp_bug_names[i])) {
			cp_bug_id = i;
			pr_info("bad_peer: loaded with bug=%s (deliberately broken test client)\n",
				cp_bug_names[i]);
			return 0;
		}
	}
	pr_err("bad_peer: unknown bug=%s\n", bug);
	return -EINVAL;
}

#define CP_BAD_INIT() cp_bad_init()

MODULE_DESCRIPTION("nvpeer test bench: deliberately broken peer-memory clients (one rule broken per bug=)");

#include "classic_peer.c"
