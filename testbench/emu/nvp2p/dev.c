// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P provider emulator: /dev/nvp2p_emu, the "GPU driver" of a
 * process (ABI: testbench/emu/include/nvp2p_emu_ioctl.h).
 */
#define pr_fmt(fmt) "nvp2p_emu: " fmt

#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "emu.h"

/* Most records one LIST call copies out. */
#define EMU_LIST_MAX 65536

/*
 * Per open file.
 * Invariants: `pending` is set only while `lock` is held by `pending_task`,
 * inside the ALLOC ioctl's vm_mmap() of this file; the mmap handler accepts
 * nothing else.
 */
struct emu_file {
	struct mutex lock;
	struct emu_alloc *pending;
	struct task_struct *pending_task;
	struct emu_client *client;
};

static int emu_open(struct inode *inode, struct file *file)
{
	struct emu_file *f = kzalloc_obj(*f);

	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	f->client = emu_client_create();
	if (!f->client) {
		kfree(f);
		return -ENOMEM;
	}
	file->private_data = f;
	return 0;
}

/* Closing the GPU fd = process exit for everything allocated through it. */
static int emu_release(struct inode *inode, struct file *file)
{
	struct emu_file *f = file->private_data;

	emu_client_destroy(f->client);
	emu_free_matching(0, f, false, NULL, NULL);
	kfree(f);
	return 0;
}

static unsigned long emu_get_unmapped_area(struct file *file, unsigned long addr,
					   unsigned long len, unsigned long pgoff,
					   unsigned long flags)
{
	unsigned long base;

	if (flags & MAP_FIXED)
		return (addr & EMU_GPU_PAGE_MASK) ? -EINVAL : addr;
	if (len > TASK_SIZE - EMU_GPU_PAGE_SIZE)
		return -ENOMEM;
	/* Room for one extra GPU page, then align up: a 64 KiB aligned VA. */
	base = mm_get_unmapped_area(file, 0, len + EMU_GPU_PAGE_SIZE, pgoff, flags);
	if (IS_ERR_VALUE(base))
		return base;
	return ALIGN(base, EMU_GPU_PAGE_SIZE);
}

static int emu_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct emu_file *f = file->private_data;

	/* Only the ALLOC ioctl maps; a plain mmap() of the device is refused. */
	if (!f->pending || f->pending_task != current)
		return -EINVAL;
	return emu_mmap_alloc(f->pending, vma);
}

static long ioc_alloc(struct file *file, struct emu_file *f, void __user *uarg)
{
	struct nvp2p_emu_alloc req;
	struct emu_alloc *a;
	unsigned long va;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.reserved || (req.flags & ~NVP2P_EMU_ALLOC_FLAGS_ALL) || !req.size)
		return -EINVAL;
	if (!(file->f_mode & FMODE_WRITE))
		return -EBADF;
	a = emu_alloc_create(req.size, req.flags);
	if (IS_ERR(a))
		return PTR_ERR(a);
	a->owner = f;

	mutex_lock(&f->lock);
	f->pending = a;
	f->pending_task = current;
	va = vm_mmap(file, 0, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
	f->pending = NULL;
	f->pending_task = NULL;
	mutex_unlock(&f->lock);
	if (IS_ERR_VALUE(va)) {
		emu_alloc_put(a);
		return (long)va;
	}
	emu_alloc_publish(a);

	req.va = a->va;
	req.size = a->size;
	req.handle = a->handle;
	req.p2p_token = a->token;
	req.va_space = a->va_space;
	req.pad = 0;
	if (copy_to_user(uarg, &req, sizeof(req))) {
		kref_get(&a->ref);
		emu_free_alloc(a, NULL);
		emu_unmap_user(a);
		emu_alloc_put(a);
		return -EFAULT;
	}
	return 0;
}

static long ioc_free(void __user *uarg)
{
	struct nvp2p_emu_free req;
	struct emu_alloc *a;
	unsigned int cbs = 0;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.pad || (!req.va && !req.handle))
		return -EINVAL;
	a = emu_alloc_find_owned(current->tgid, req.va, req.handle);
	if (!a)
		return -EINVAL;
	ret = emu_free_alloc(a, &cbs);
	if (!ret)
		emu_unmap_user(a);
	emu_alloc_put(a);
	if (ret)
		return ret;
	req.callbacks = cbs;
	return copy_to_user(uarg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_pid_op(unsigned int cmd, void __user *uarg)
{
	struct nvp2p_emu_pid_op req;
	unsigned int allocs = 0, cbs = 0;
	pid_t tgid;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.pad || req.tgid < 0)
		return -EINVAL;
	tgid = req.tgid ? req.tgid : current->tgid;
	emu_free_matching(tgid, NULL, cmd == NVP2P_EMU_IOC_GPU_TEARDOWN,
			  &allocs, &cbs);
	req.allocs = allocs;
	req.callbacks = cbs;
	return copy_to_user(uarg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_list(void __user *uarg)
{
	struct nvp2p_emu_list req;
	size_t rec;
	void *buf = NULL;
	u32 n = 0;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.pad || req.kind > NVP2P_EMU_LIST_PINS || req.cap > EMU_LIST_MAX ||
	    (req.cap && !req.buf))
		return -EINVAL;
	rec = req.kind == NVP2P_EMU_LIST_ALLOCS ? sizeof(struct nvp2p_emu_alloc_info) :
						  sizeof(struct nvp2p_emu_pin_info);
	if (req.cap) {
		buf = kvcalloc(req.cap, rec, GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
	}
	ret = emu_list(req.kind, buf, req.cap, &n);
	if (!ret && req.cap &&
	    copy_to_user(u64_to_user_ptr(req.buf), buf, (size_t)min(n, req.cap) * rec))
		ret = -EFAULT;
	kvfree(buf);
	if (ret)
		return ret;
	req.count = n;
	return copy_to_user(uarg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_fault(void __user *uarg)
{
	struct nvp2p_emu_fault req;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	ret = emu_set_fault(&req);
	if (ret)
		return ret;
	return copy_to_user(uarg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_config(unsigned int cmd, void __user *uarg)
{
	struct nvp2p_emu_config cfg;

	if (cmd == NVP2P_EMU_IOC_GET_CONFIG) {
		emu_get_config(&cfg);
		return copy_to_user(uarg, &cfg, sizeof(cfg)) ? -EFAULT : 0;
	}
	if (copy_from_user(&cfg, uarg, sizeof(cfg)))
		return -EFAULT;
	return emu_set_config(&cfg);
}

static long ioc_stats(void __user *uarg)
{
	struct nvp2p_emu_stats *st;
	long ret;

	st = kmalloc_obj(*st);
	if (!st)
		return -ENOMEM;
	emu_fill_stats(st);
	ret = copy_to_user(uarg, st, sizeof(*st)) ? -EFAULT : 0;
	kfree(st);
	return ret;
}

static long ioc_client(struct emu_file *f, void __user *uarg)
{
	struct nvp2p_emu_client req;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	ret = emu_client_ioctl(f->client, &req);
	if (ret)
		return ret;
	return copy_to_user(uarg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long emu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct emu_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NVP2P_EMU_IOC_ALLOC:
		return ioc_alloc(file, f, uarg);
	case NVP2P_EMU_IOC_FREE:
		return ioc_free(uarg);
	case NVP2P_EMU_IOC_LIST:
		return ioc_list(uarg);
	case NVP2P_EMU_IOC_DESTROY_CONTEXT:
	case NVP2P_EMU_IOC_PROCESS_EXIT:
	case NVP2P_EMU_IOC_GPU_TEARDOWN:
		return ioc_pid_op(cmd, uarg);
	case NVP2P_EMU_IOC_SET_FAULT:
		return ioc_fault(uarg);
	case NVP2P_EMU_IOC_GET_CONFIG:
	case NVP2P_EMU_IOC_SET_CONFIG:
		return ioc_config(cmd, uarg);
	case NVP2P_EMU_IOC_STATS:
		return ioc_stats(uarg);
	case NVP2P_EMU_IOC_RESET:
		emu_reset();
		return 0;
	case NVP2P_EMU_IOC_CLIENT:
		return ioc_client(f, uarg);
	case NVP2P_EMU_IOC_CHECK_LEAKS:
		return emu_check_leaks();
	default:
		return -ENOTTY;
	}
}

static const struct file_operations emu_fops = {
	.owner = THIS_MODULE,
	.open = emu_open,
	.release = emu_release,
	.unlocked_ioctl = emu_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = emu_mmap,
	.get_unmapped_area = emu_get_unmapped_area,
};

static struct miscdevice emu_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvp2p_emu",
	.fops = &emu_fops,
	.mode = 0600,
};

int emu_dev_init(void)
{
	return misc_register(&emu_misc);
}

void emu_dev_exit(void)
{
	misc_deregister(&emu_misc);
}
