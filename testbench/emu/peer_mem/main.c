// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: an emulated MLNX_OFED / DOCA-OFED peer-memory core for the
 * nvpeer test bench.  Exports ib_register_peer_memory_client and
 * ib_unregister_peer_memory_client with the real ABI, and plays the HCA
 * driver through /dev/peer_mem_emu.  Test fixture only.
 */
#include <linux/module.h>
#include <linux/string.h>
#include "pme.h"

static char *model = "doca3";
module_param(model, charp, 0444);
MODULE_PARM_DESC(model, "OFED core model at load: 4.9, 5.1 (5.1-5.4), 5.4hf (5.1/5.4 hotfix with INVALIDATE_UNMAPS), 5.5 (5.5-23.10), doca3 (DOCA-OFED 3.x / OFED 24.04+ on a kernel without the mm_kobj export: no memory_peers; default)");
static bool stop_notifier_bug;
module_param(stop_notifier_bug, bool, 0444);
MODULE_PARM_DESC(stop_notifier_bug, "emulate the pre-25.04 stop_invalidation_notifier lock condition (default off = 25.04+)");
static bool sysfs = true;
module_param(sysfs, bool, 0444);
MODULE_PARM_DESC(sysfs, "create /sys/kernel/mm/memory_peers/<name> in the models whose core has it (not doca3; default on)");
static bool dereg_pages_quirk = true;
module_param(dereg_pages_quirk, bool, 0444);
MODULE_PARM_DESC(dereg_pages_quirk, "num_dereg_pages reads the zeroed sg table, as OFED 5.5+ (default on)");
static bool strict_sg;
module_param(strict_sg, bool, 0444);
MODULE_PARM_DESC(strict_sg, "require put_pages to free the sg_table (header rule; flags hazard H9; default off)");
static bool lockdep_invalidate;
module_param(lockdep_invalidate, bool, 0444);
MODULE_PARM_DESC(lockdep_invalidate, "annotate invalidate's mapping_lock wait for lockdep (reports the H4 cycle; default off)");
static uint hang_timeout_ms = 20000;
module_param(hang_timeout_ms, uint, 0444);
MODULE_PARM_DESC(hang_timeout_ms, "lock waits longer than this are recorded as deadlocks and abandoned (0 = wait forever)");
static uint hold_timeout_ms = 10000;
module_param(hold_timeout_ms, uint, 0444);
MODULE_PARM_DESC(hold_timeout_ms, "how long a PME_REG_HOLD registration waits for ACTIVATE");

struct pme_cfg pme_cfg;
DEFINE_MUTEX(pme_cfg_lock);

static const struct pme_model_traits pme_models[] = {
	[PME_MODEL_4_9] = { .name = "4.9", .tickets = true, .page_size_mandatory = true,
			    .memory_peers = true, .stop_notifier_bug = true },
	[PME_MODEL_5_1] = { .name = "5.1", .memory_peers = true },
	[PME_MODEL_5_4HF] = { .name = "5.4hf", .invalidate_unmaps = true, .memory_peers = true,
			      .stop_notifier_bug = true },
	[PME_MODEL_5_5] = { .name = "5.5", .page_size_after_map = true, .invalidate_unmaps = true,
			    .memory_peers = true, .stop_notifier_bug = true },
	/* (no DOCA 3.x has the pre-25.04 stop-notifier condition: refused there) */
	[PME_MODEL_DOCA3] = { .name = "doca3", .page_size_after_map = true,
			      .invalidate_unmaps = true },
};

bool pme_model_valid(u32 model)
{
	return model < ARRAY_SIZE(pme_models) && pme_models[model].name;
}

const struct pme_model_traits *pme_model(u32 model)
{
	/* pme_cfg.model and every MR's model were checked when set */
	if (WARN_ON_ONCE(!pme_model_valid(model)))
		model = PME_MODEL_DOCA3;
	return &pme_models[model];
}

static int pme_parse_model(const char *s, u32 *out)
{
	u32 m;

	for (m = 0; m < ARRAY_SIZE(pme_models); m++) {
		if (pme_models[m].name && sysfs_streq(s, pme_models[m].name)) {
			*out = m;
			return 0;
		}
	}
	return -EINVAL;
}

static int __init pme_init(void)
{
	int ret;

	ret = pme_parse_model(model, &pme_cfg.model);
	if (ret) {
		pr_err("peer_mem_emu: unknown model \"%s\" (4.9, 5.1, 5.4hf, 5.5, doca3)\n", model);
		return ret;
	}
	if (stop_notifier_bug && !pme_model(pme_cfg.model)->stop_notifier_bug) {
		pr_err("peer_mem_emu: stop_notifier_bug=1 with model %s, which never had it\n", model);
		return -EINVAL;
	}
	pme_cfg.flags = (stop_notifier_bug ? PME_CFG_STOP_NOTIFIER_BUG : 0) |
			(sysfs ? PME_CFG_SYSFS : 0) |
			(dereg_pages_quirk ? PME_CFG_DEREG_PAGES_QUIRK : 0) |
			(strict_sg ? PME_CFG_STRICT_SG : 0) |
			(lockdep_invalidate ? PME_CFG_LOCKDEP_INVAL : 0);
	pme_cfg.hang_timeout_ms = min(hang_timeout_ms, 600000u);
	pme_cfg.hold_timeout_ms = min(hold_timeout_ms, 600000u);

	ret = pme_sysfs_init();
	if (ret)
		return ret;
	ret = pme_devices_init();
	if (ret)
		goto err_sysfs;
	pme_debugfs_init();
	ret = pme_chardev_init();
	if (ret)
		goto err_dev;
	pr_info("peer_mem_emu: loaded, model %s%s\n", model,
		stop_notifier_bug ? " with pre-25.04 stop-notifier bug" : "");
	return 0;

err_dev:
	pme_debugfs_exit();
	pme_devices_exit();
err_sysfs:
	pme_sysfs_exit();
	return ret;
}

static void __exit pme_exit(void)
{
	pme_chardev_exit();
	pme_clients_cleanup();
	pme_debugfs_exit();
	pme_devices_exit();
	pme_sysfs_exit();
	pr_info("peer_mem_emu: unloaded, %lld violations recorded\n",
		atomic64_read(&pme_cnt.violations));
}

module_init(pme_init);
module_exit(pme_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test bench: emulated OFED peer-memory core");
