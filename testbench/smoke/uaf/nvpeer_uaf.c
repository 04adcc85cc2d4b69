// SPDX-License-Identifier: GPL-2.0
/*
 * Bench canary: a module with a deliberate use-after-free on load, so that the bench proves KASAN
 * is live and that the runner fails a run on a KASAN report. Never load it outside the bench.
 */
#include <linux/module.h>
#include <linux/slab.h>

static int __init nvpeer_uaf_init(void)
{
	volatile char *p = kmalloc(64, GFP_KERNEL);

	if (!p)
		return -ENOMEM;
	kfree((void *)p);
	pr_info("nvpeer_uaf: reading freed memory on purpose: %d\n", p[8]);
	return 0;
}

static void __exit nvpeer_uaf_exit(void)
{
}

module_init(nvpeer_uaf_init);
module_exit(nvpeer_uaf_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer bench canary: planted use-after-free");
