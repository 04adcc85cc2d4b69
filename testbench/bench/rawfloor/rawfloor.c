// SPDX-License-Identifier: GPL-2.0
/*
 * rawfloor: the floor of the registration-path benchmark (issue 8).
 *
 * One RF_IOC_REG does what any GPUDirect RDMA registration must do at the
 * provider and nothing else: nvidia_p2p_get_pages (or _persistent) on the
 * caller's emulated GPU range, then nvidia_p2p_dma_map_pages for the QEMU
 * `edu` PCI device (the same DMA peer the core emulator uses). RF_IOC_DEREG
 * does nvidia_p2p_dma_unmap_pages + nvidia_p2p_put_pages(_persistent). No
 * peer-memory core, no client context, no sg_table: the cost left is the
 * provider's own pin + map plus one syscall, which is what nvpeer and the
 * classic client are measured against (1.0x).
 *
 * The free callback (memory freed under a live registration) only marks the
 * record revoked; a later DEREG then skips dma_unmap (the provider already
 * tore the mapping down) and still calls put_pages, which the provider
 * answers with 0 after a callback. The record's mutex is held across
 * dma_unmap_pages and taken by the callback, so the two never overlap; no
 * lock of ours is held across a call that takes the provider's RM lock.
 * A free that lands between get_pages and dma_map_pages is not handled (the
 * benchmark never frees during a registration).
 *
 * Test-bench fixture only; never loaded with the product.
 */
#define pr_fmt(fmt) "rawfloor: " fmt

#include <linux/fs.h>
#include <linux/ktime.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/xarray.h>

#include <nv-p2p.h>
#include "rawfloor_ioctl.h"

#define RF_GPU_PAGE		(64ULL * 1024)
#define RF_EDU_VENDOR		0x1234
#define RF_EDU_DEVICE		0x11e8

/* One registration. `revoked`, `map` are protected by `lock`. */
struct rf_mr {
	struct mutex lock;
	u64 va;
	bool persistent;
	bool revoked;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
};

/* Registrations of one open file, by id. */
struct rf_file {
	struct xarray mrs;
};

static struct pci_dev *rf_peer;

static void rf_free_callback(void *data)
{
	struct rf_mr *mr = data;

	mutex_lock(&mr->lock);
	mr->revoked = true;
	mr->map = NULL;
	mutex_unlock(&mr->lock);
}

static long rf_reg(struct rf_file *f, struct rf_reg __user *uarg)
{
	struct rf_reg r;
	struct rf_mr *mr;
	u64 t0, t1, t2;
	u32 id;
	int ret;

	if (copy_from_user(&r, uarg, sizeof(r)))
		return -EFAULT;
	if ((r.flags & ~RF_REG_FLAGS_ALL) || r.pad || !r.len ||
	    (r.va & (RF_GPU_PAGE - 1)) || (r.len & (RF_GPU_PAGE - 1)) || r.va + r.len < r.va)
		return -EINVAL;
	if (!rf_peer)
		return -ENODEV;

	mr = kzalloc_obj(*mr);
	if (!mr)
		return -ENOMEM;
	mutex_init(&mr->lock);
	mr->va = r.va;
	mr->persistent = r.flags & RF_REG_PERSISTENT;

	t0 = ktime_get_ns();
	if (mr->persistent)
		ret = nvidia_p2p_get_pages_persistent(r.va, r.len, &mr->pt, 0);
	else
		ret = nvidia_p2p_get_pages(0, 0, r.va, r.len, &mr->pt, rf_free_callback, mr);
	t1 = ktime_get_ns();
	if (ret)
		goto out_free;
	ret = nvidia_p2p_dma_map_pages(rf_peer, mr->pt, &mr->map);
	t2 = ktime_get_ns();
	if (ret)
		goto out_put;

	ret = xa_alloc(&f->mrs, &id, mr, xa_limit_31b, GFP_KERNEL);
	if (ret)
		goto out_unmap;

	r.id = id;
	r.get_ns = t1 - t0;
	r.map_ns = t2 - t1;
	r.entries = mr->map->entries;
	if (copy_to_user(uarg, &r, sizeof(r))) {
		/* Nobody learns the id: undo. */
		xa_erase(&f->mrs, id);
		ret = -EFAULT;
		goto out_unmap;
	}
	return 0;

out_unmap:
	mutex_lock(&mr->lock);
	if (!mr->revoked)
		nvidia_p2p_dma_unmap_pages(rf_peer, mr->pt, mr->map);
	mutex_unlock(&mr->lock);
out_put:
	if (mr->persistent)
		nvidia_p2p_put_pages_persistent(r.va, mr->pt, 0);
	else
		nvidia_p2p_put_pages(0, 0, r.va, mr->pt);
out_free:
	kfree(mr);
	return ret;
}

/* Unmap + unpin one registration already removed from its file; frees it. */
static void rf_teardown(struct rf_mr *mr, struct rf_dereg *d)
{
	u64 t0, t1, t2;

	t0 = ktime_get_ns();
	mutex_lock(&mr->lock);
	d->revoked = mr->revoked;
	if (!mr->revoked && mr->map)
		nvidia_p2p_dma_unmap_pages(rf_peer, mr->pt, mr->map);
	mr->map = NULL;
	mutex_unlock(&mr->lock);
	t1 = ktime_get_ns();
	/* After put_pages returns no free callback can run for this table. */
	if (mr->persistent)
		nvidia_p2p_put_pages_persistent(mr->va, mr->pt, 0);
	else
		nvidia_p2p_put_pages(0, 0, mr->va, mr->pt);
	t2 = ktime_get_ns();
	d->unmap_ns = d->revoked ? 0 : t1 - t0;
	d->put_ns = t2 - t1;
	kfree(mr);
}

static long rf_dereg(struct rf_file *f, struct rf_dereg __user *uarg)
{
	struct rf_dereg d;
	struct rf_mr *mr;

	if (copy_from_user(&d, uarg, sizeof(d)))
		return -EFAULT;
	if (!d.id)
		return -EINVAL;
	mr = xa_erase(&f->mrs, d.id);
	if (!mr)
		return -ENOENT;
	rf_teardown(mr, &d);
	return copy_to_user(uarg, &d, sizeof(d)) ? -EFAULT : 0;
}

static long rf_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct rf_file *f = file->private_data;

	switch (cmd) {
	case RF_IOC_REG:
		return rf_reg(f, (struct rf_reg __user *)arg);
	case RF_IOC_DEREG:
		return rf_dereg(f, (struct rf_dereg __user *)arg);
	default:
		return -ENOTTY;
	}
}

static int rf_open(struct inode *inode, struct file *file)
{
	struct rf_file *f = kzalloc_obj(*f);

	if (!f)
		return -ENOMEM;
	xa_init_flags(&f->mrs, XA_FLAGS_ALLOC1);
	file->private_data = f;
	return 0;
}

static int rf_release(struct inode *inode, struct file *file)
{
	struct rf_file *f = file->private_data;
	struct rf_dereg d;
	struct rf_mr *mr;
	unsigned long id;

	xa_for_each(&f->mrs, id, mr) {
		xa_erase(&f->mrs, id);
		rf_teardown(mr, &d);
	}
	xa_destroy(&f->mrs);
	kfree(f);
	return 0;
}

static const struct file_operations rf_fops = {
	.owner = THIS_MODULE,
	.open = rf_open,
	.release = rf_release,
	.unlocked_ioctl = rf_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice rf_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvpeer_rawfloor",
	.fops = &rf_fops,
	.mode = 0600,
};

static int __init rf_init(void)
{
	int ret;

	rf_peer = pci_get_device(RF_EDU_VENDOR, RF_EDU_DEVICE, NULL);
	if (!rf_peer)
		pr_warn("no QEMU edu device (1234:11e8): RF_IOC_REG will fail with -ENODEV\n");
	/* As peer_mem_emu does: the 64-bit DMA mask an HCA driver sets (IOVA beyond 4 GiB). */
	else if (dma_set_mask_and_coherent(&rf_peer->dev, DMA_BIT_MASK(64)))
		pr_warn("edu keeps its 32-bit DMA mask\n");
	ret = misc_register(&rf_misc);
	if (ret)
		pci_dev_put(rf_peer);
	return ret;
}

static void __exit rf_exit(void)
{
	misc_deregister(&rf_misc);
	pci_dev_put(rf_peer);
}

module_init(rf_init);
module_exit(rf_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer bench: raw NVIDIA P2P pin+map floor for the registration-path benchmark");
