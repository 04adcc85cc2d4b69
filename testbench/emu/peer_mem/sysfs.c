// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: /sys/kernel/mm/memory_peers/<client name>/ statistics
 * (docs/emulators.md).  The "memory_peers" directory is created when
 * the first client with sysfs registers and removed with the last one.
 *
 * The kernel does not export mm_kobj (the /sys/kernel/mm kobject), so the
 * emulator finds it through kernfs: the kernfs node of a kobject directory
 * carries the kobject as its private data.  If it cannot be found, sysfs is
 * reported unavailable (like OFED >= 24.04 built for a kernel without an
 * exported mm_kobj) and clients register without a directory.
 */
#include <linux/kernfs.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include "pme.h"

static struct kobject *pme_mm_kobj;		/* /sys/kernel/mm */
static struct kobject *pme_memory_peers;	/* /sys/kernel/mm/memory_peers */
static unsigned int pme_sysfs_users;

struct pme_sysfs_dir {
	struct kobject kobj;
	struct pme_client *client;
};

static struct pme_client *pme_kobj_client(struct kobject *kobj)
{
	return container_of(kobj, struct pme_sysfs_dir, kobj)->client;
}

static ssize_t version_show(struct kobject *kobj, struct kobj_attribute *attr,
			    char *buf)
{
	return sysfs_emit(buf, "%s\n", pme_kobj_client(kobj)->version);
}

#define PME_COUNTER_ATTR(field)						\
static ssize_t field##_show(struct kobject *kobj,			\
			    struct kobj_attribute *attr, char *buf)	\
{									\
	return sysfs_emit(buf, "%llu\n", (unsigned long long)		\
			  atomic64_read(&pme_kobj_client(kobj)->field)); \
}									\
static struct kobj_attribute pme_attr_##field = __ATTR_RO(field)

PME_COUNTER_ATTR(num_alloc_mrs);
PME_COUNTER_ATTR(num_dealloc_mrs);
PME_COUNTER_ATTR(num_reg_pages);
PME_COUNTER_ATTR(num_dereg_pages);
PME_COUNTER_ATTR(num_reg_bytes);
PME_COUNTER_ATTR(num_dereg_bytes);

static ssize_t num_free_callbacks_show(struct kobject *kobj,
				       struct kobj_attribute *attr, char *buf)
{
	struct pme_client *c = pme_kobj_client(kobj);
	u64 v;

	xa_lock(&c->umem_xa);
	v = c->num_free_callbacks;
	xa_unlock(&c->umem_xa);
	return sysfs_emit(buf, "%llu\n", (unsigned long long)v);
}

static struct kobj_attribute pme_attr_version = __ATTR_RO(version);
static struct kobj_attribute pme_attr_num_free_callbacks =
	__ATTR_RO(num_free_callbacks);

static struct attribute *pme_client_attrs[] = {
	&pme_attr_version.attr,
	&pme_attr_num_alloc_mrs.attr,
	&pme_attr_num_dealloc_mrs.attr,
	&pme_attr_num_reg_pages.attr,
	&pme_attr_num_dereg_pages.attr,
	&pme_attr_num_reg_bytes.attr,
	&pme_attr_num_dereg_bytes.attr,
	&pme_attr_num_free_callbacks.attr,
	NULL,
};
ATTRIBUTE_GROUPS(pme_client);

static void pme_sysfs_dir_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct pme_sysfs_dir, kobj));
}

static const struct kobj_type pme_client_ktype = {
	.release = pme_sysfs_dir_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = pme_client_groups,
};

int pme_sysfs_init(void)
{
	struct kernfs_node *kn;

	kn = kernfs_find_and_get(kernel_kobj->sd, "mm");
	if (!kn) {
		pr_warn("peer_mem_emu: /sys/kernel/mm not found; memory_peers sysfs disabled\n");
		return 0;
	}
	if (kernfs_type(kn) == KERNFS_DIR && kn->priv)
		pme_mm_kobj = kobject_get(kn->priv);
	kernfs_put(kn);
	return 0;
}

void pme_sysfs_exit(void)
{
	kobject_put(pme_mm_kobj);
	pme_mm_kobj = NULL;
}

bool pme_sysfs_available(void)
{
	return pme_mm_kobj != NULL;
}

/* Called with pme_peer_memory_mutex held. -EEXIST: name already taken. */
int pme_sysfs_add_client(struct pme_client *c)
{
	struct pme_sysfs_dir *d;
	struct kernfs_node *kn;
	int ret;

	if (!pme_mm_kobj)
		return -ENODEV;
	ret = pme_fault(PME_FP_SYSFS);
	if (ret)
		return ret;
	if (!pme_memory_peers) {
		pme_memory_peers = kobject_create_and_add("memory_peers", pme_mm_kobj);
		if (!pme_memory_peers)
			return -ENOMEM;
	}
	/* Look first: kobject_add would print a duplicate-name stack dump. */
	kn = kernfs_find_and_get(pme_memory_peers->sd, c->name);
	if (kn) {
		kernfs_put(kn);
		ret = -EEXIST;
		goto out_maybe_drop;
	}
	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d) {
		ret = -ENOMEM;
		goto out_maybe_drop;
	}
	d->client = c;
	ret = kobject_init_and_add(&d->kobj, &pme_client_ktype, pme_memory_peers,
				   "%s", c->name);
	if (ret) {
		kobject_put(&d->kobj);
		goto out_maybe_drop;
	}
	c->sysfs = &d->kobj;
	pme_sysfs_users++;
	return 0;

out_maybe_drop:
	if (!pme_sysfs_users) {
		kobject_put(pme_memory_peers);
		pme_memory_peers = NULL;
	}
	return ret;
}

/* Called with pme_peer_memory_mutex held. */
void pme_sysfs_del_client(struct pme_client *c)
{
	if (!c->sysfs)
		return;
	kobject_put(c->sysfs);
	c->sysfs = NULL;
	if (--pme_sysfs_users == 0) {
		kobject_put(pme_memory_peers);
		pme_memory_peers = NULL;
	}
}
