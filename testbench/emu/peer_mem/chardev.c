// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: /dev/peer_mem_emu, the emulated uverbs consumer.  Each open
 * file owns its registrations; the last close deregisters them (uverbs
 * teardown at process exit).
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "pme.h"

static int pme_open(struct inode *inode, struct file *filp)
{
	struct pme_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	xa_init_flags(&f->mrs, XA_FLAGS_ALLOC1);
	f->next_handle = 1;
	filp->private_data = f;
	return 0;
}

static int pme_release(struct inode *inode, struct file *filp)
{
	struct pme_file *f = filp->private_data;
	struct pme_mr *mr;
	unsigned long idx;

	/* No ioctl can run any more: every MR here is committed. */
	xa_for_each(&f->mrs, idx, mr) {
		xa_erase(&f->mrs, idx);
		pme_mr_destroy(mr);
		pme_mr_put(mr);
	}
	xa_destroy(&f->mrs);
	kfree(f);
	return 0;
}

/* Find a committed MR and take it out of the table (one dereg wins). */
static struct pme_mr *pme_take_mr(struct pme_file *f, u32 handle, int *err)
{
	struct pme_mr *mr;

	xa_lock(&f->mrs);
	mr = xa_load(&f->mrs, handle);
	if (!mr) {
		*err = -ENOENT;
	} else if (!READ_ONCE(mr->committed)) {
		*err = -EBUSY;
		mr = NULL;
	} else {
		__xa_erase(&f->mrs, handle);
	}
	xa_unlock(&f->mrs);
	return mr;
}

struct pme_dereg_work {
	struct work_struct work;
	struct pme_mr *mr;
};

static void pme_dereg_workfn(struct work_struct *work)
{
	struct pme_dereg_work *w = container_of(work, struct pme_dereg_work, work);

	pme_mr_destroy(w->mr);
}

static int pme_ioc_deregister(struct pme_file *f, void __user *arg)
{
	struct pme_dereg_work w;
	struct pme_handle_op op;
	struct pme_mr *mr;
	int err = 0;

	if (copy_from_user(&op, arg, sizeof(op)))
		return -EFAULT;
	if (op.flags & ~PME_DEREG_KWORKER)
		return -EINVAL;
	mr = pme_take_mr(f, op.handle, &err);
	if (!mr)
		return err;
	if (op.flags & PME_DEREG_KWORKER) {
		INIT_WORK_ONSTACK(&w.work, pme_dereg_workfn);
		w.mr = mr;
		queue_work(system_unbound_wq, &w.work);
		flush_work(&w.work);
		destroy_work_on_stack(&w.work);
	} else {
		pme_mr_destroy(mr);
	}
	pme_mr_put(mr);
	return 0;
}

static int pme_ioc_query(struct pme_file *f, void __user *arg)
{
	struct pme_query q;
	struct pme_mr *mr;

	if (copy_from_user(&q, arg, sizeof(q)))
		return -EFAULT;
	xa_lock(&f->mrs);
	mr = xa_load(&f->mrs, q.handle);
	if (mr)
		kref_get(&mr->ref);
	xa_unlock(&f->mrs);
	if (!mr)
		return -ENOENT;
	pme_mr_query(mr, &q);
	pme_mr_put(mr);
	return copy_to_user(arg, &q, sizeof(q)) ? -EFAULT : 0;
}

static int pme_ioc_set_config(void __user *arg)
{
	struct pme_config c;
	int ret = 0;

	if (copy_from_user(&c, arg, sizeof(c)))
		return -EFAULT;
	if (!pme_model_valid(c.model) ||
	    c.flags & ~PME_CFG_ALL_FLAGS || c.hang_timeout_ms > 600000 ||
	    c.hold_timeout_ms > 600000)
		return -EINVAL;
	/* the pre-25.04 stop-notifier condition, only on a model that had it */
	if ((c.flags & PME_CFG_STOP_NOTIFIER_BUG) && !pme_model(c.model)->stop_notifier_bug)
		return -EINVAL;
	mutex_lock(&pme_cfg_lock);
	if (c.model != pme_cfg.model && atomic64_read(&pme_cnt.live_mrs))
		ret = -EBUSY;
	else
		pme_cfg = (struct pme_cfg){ c.model, c.flags, c.hang_timeout_ms,
					    c.hold_timeout_ms };
	mutex_unlock(&pme_cfg_lock);
	return ret;
}

static int pme_ioc_get_config(void __user *arg)
{
	struct pme_config c;

	mutex_lock(&pme_cfg_lock);
	c = (struct pme_config){ pme_cfg.model, pme_cfg.flags,
				 pme_cfg.hang_timeout_ms, pme_cfg.hold_timeout_ms };
	mutex_unlock(&pme_cfg_lock);
	return copy_to_user(arg, &c, sizeof(c)) ? -EFAULT : 0;
}

static int pme_ioc_get_client(void __user *arg)
{
	struct pme_client_info info;
	struct pme_client *c;
	u32 i = 0;
	int ret = -ENOENT;

	if (copy_from_user(&info, arg, sizeof(info)))
		return -EFAULT;
	mutex_lock(&pme_peer_memory_mutex);
	list_for_each_entry(c, &pme_clients, node) {
		if (i++ != info.index)
			continue;
		info.flags = (c->invalidating ? PME_CL_INVALIDATING : 0) |
			     (c->ex ? PME_CL_EX : 0) |
			     (c->unmaps ? PME_CL_UNMAPS : 0) |
			     (c->zombie ? PME_CL_ZOMBIE : 0) |
			     (c->hooks49 ? PME_CL_49_HOOKS : 0) |
			     (c->sysfs ? PME_CL_SYSFS : 0);
		info.usecnt = atomic_read(&c->usecnt) - 1;
		info.reg_id = c->reg_id;
		memcpy(info.name, c->name, sizeof(info.name));
		memcpy(info.version, c->snapshot + IB_PEER_MEMORY_NAME_MAX,
		       sizeof(info.version));
		ret = 0;
		break;
	}
	mutex_unlock(&pme_peer_memory_mutex);
	if (ret)
		return ret;
	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long pme_ioctl(struct file *filp, unsigned int cmd, unsigned long uarg)
{
	struct pme_file *f = filp->private_data;
	void __user *arg = (void __user *)uarg;
	union {
		struct pme_reg reg;
		struct pme_handle_op op;
		struct pme_fault fault;
		struct pme_delay delay;
		struct pme_stats stats;
		struct pme_violation viol;
	} *u;
	long ret;
	u32 v;

	switch (cmd) {
	case PME_IOC_ABI_VERSION:
		v = PME_ABI_VERSION;
		return put_user(v, (u32 __user *)arg);
	case PME_IOC_DEREGISTER:
		return pme_ioc_deregister(f, arg);
	case PME_IOC_QUERY:
		return pme_ioc_query(f, arg);
	case PME_IOC_SET_CONFIG:
		return pme_ioc_set_config(arg);
	case PME_IOC_GET_CONFIG:
		return pme_ioc_get_config(arg);
	case PME_IOC_GET_CLIENT:
		return pme_ioc_get_client(arg);
	case PME_IOC_RESET:
		pme_reset();
		return 0;
	}

	u = kzalloc(sizeof(*u), GFP_KERNEL);
	if (!u)
		return -ENOMEM;
	switch (cmd) {
	case PME_IOC_REGISTER:
		ret = -EFAULT;
		if (copy_from_user(&u->reg, arg, sizeof(u->reg)))
			break;
		ret = pme_mr_register(f, &u->reg);
		if (!ret && copy_to_user(arg, &u->reg, sizeof(u->reg)))
			ret = -EFAULT;	/* the MR stays; close or DEREGISTER frees it */
		break;
	case PME_IOC_ACTIVATE:
		ret = -EFAULT;
		if (!copy_from_user(&u->op, arg, sizeof(u->op)))
			ret = pme_mr_activate(f, &u->op);
		break;
	case PME_IOC_SET_FAULT:
		ret = -EFAULT;
		if (!copy_from_user(&u->fault, arg, sizeof(u->fault)))
			ret = pme_set_fault(&u->fault);
		break;
	case PME_IOC_SET_DELAY:
		ret = -EFAULT;
		if (!copy_from_user(&u->delay, arg, sizeof(u->delay)))
			ret = pme_set_delay(&u->delay);
		break;
	case PME_IOC_GET_STATS:
		pme_get_stats(&u->stats);
		ret = copy_to_user(arg, &u->stats, sizeof(u->stats)) ? -EFAULT : 0;
		break;
	case PME_IOC_GET_VIOLATION:
		ret = -EFAULT;
		if (copy_from_user(&u->viol, arg, sizeof(u->viol)))
			break;
		ret = pme_get_violation(&u->viol);
		if (copy_to_user(arg, &u->viol, sizeof(u->viol)))
			ret = -EFAULT;
		break;
	default:
		ret = -ENOTTY;
	}
	kfree(u);
	return ret;
}

static const struct file_operations pme_fops = {
	.owner = THIS_MODULE,
	.open = pme_open,
	.release = pme_release,
	.unlocked_ioctl = pme_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice pme_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "peer_mem_emu",
	.fops = &pme_fops,
	.mode = 0666,
};

int pme_chardev_init(void)
{
	return misc_register(&pme_misc);
}

void pme_chardev_exit(void)
{
	misc_deregister(&pme_misc);
}
