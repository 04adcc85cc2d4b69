// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P provider emulator: module setup, parameters, statistics,
 * violation log, fault injection and debugfs.
 */
#define pr_fmt(fmt) "nvp2p_emu: " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/ktime.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "emu.h"

static int pt_abi = 2;
module_param(pt_abi, int, 0444);
MODULE_PARM_DESC(pt_abi, "initial page-table ABI: 1 = 0x00010002 (no flags), 2 = 0x00020000 (default)");

static unsigned long bar1_budget_mb = 256;
module_param(bar1_budget_mb, ulong, 0444);
MODULE_PARM_DESC(bar1_budget_mb, "initial BAR1 budget in MiB for all pins (0 = unlimited; default 256)");

unsigned long emu_max_mem_mb = 512;
module_param_named(max_mem_mb, emu_max_mem_mb, ulong, 0444);
MODULE_PARM_DESC(max_mem_mb, "most MiB of emulated GPU memory allocated at once (default 512)");

unsigned long emu_quarantine_max = 65536;
module_param_named(quarantine_max, emu_quarantine_max, ulong, 0644);
MODULE_PARM_DESC(quarantine_max, "tombstones of freed tables/mappings kept to recognise stale pointers (default 65536)");

struct emu_state emu = {
	.rm_lock = __MUTEX_INITIALIZER(emu.rm_lock),
	.tbl_lock = __MUTEX_INITIALIZER(emu.tbl_lock),
	.stat_lock = __SPIN_LOCK_UNLOCKED(emu.stat_lock),
	.allocs = LIST_HEAD_INIT(emu.allocs),
	.pins = LIST_HEAD_INIT(emu.pins),
	.tombs = LIST_HEAD_INIT(emu.tombs),
	.map_waits = LIST_HEAD_INIT(emu.map_waits),
};

static const char *const rule_names[NVP2P_EMU_V_COUNT] = {
	[NVP2P_EMU_V_CALL_IN_CALLBACK] = "call-in-callback",
	[NVP2P_EMU_V_UNMAP_IN_CALLBACK] = "unmap-in-callback",
	[NVP2P_EMU_V_FREED_TABLE] = "freed-table",
	[NVP2P_EMU_V_UNKNOWN_TABLE] = "unknown-table",
	[NVP2P_EMU_V_WRONG_PEER] = "wrong-peer",
	[NVP2P_EMU_V_WRONG_PROCESS_PUT] = "wrong-process-put",
	[NVP2P_EMU_V_DOUBLE_PUT] = "double-put",
	[NVP2P_EMU_V_LEAKED_PIN] = "leaked-pin",
	[NVP2P_EMU_V_STALE_MAPPING] = "stale-mapping",
	[NVP2P_EMU_V_RESERVED9] = "reserved",
	[NVP2P_EMU_V_UNMAP_RACES_TEARDOWN] = "unmap-races-teardown",
	[NVP2P_EMU_V_DMA_NOT_STOPPED] = "dma-not-stopped",
	[NVP2P_EMU_V_TABLE_MODIFIED] = "table-modified",
	[NVP2P_EMU_V_PUT_VA_MISMATCH] = "put-va-mismatch",
	[NVP2P_EMU_V_DMA_MAP_UAF] = "dma-map-uaf",
	[NVP2P_EMU_V_PUT_PERSISTENT_ON_NONPERSISTENT] = "put-persistent-on-nonpersistent",
	[NVP2P_EMU_V_DANGLING_OUT_PARAM] = "dangling-out-param",
};

/* The last violations, for debugfs. */
#define EMU_VLOG_SIZE 64
struct emu_vrec {
	u64 seq;
	unsigned int rule;
	pid_t tgid;
	char comm[TASK_COMM_LEN];
	char msg[224];
};
static struct emu_vrec vlog[EMU_VLOG_SIZE];
static u64 vlog_seq;

static struct dentry *emu_debugfs;

/*
 * Kernel log lines per rule: the first EMU_VLOG_PRINT_FIRST since the last
 * reset, then every EMU_VLOG_PRINT_EVERY-th. Every violation is counted and
 * kept in the debugfs ring all the same. A stress that meets one rule
 * thousands of times (dma-map-uaf under the race stress) would otherwise push
 * everything before it out of the kernel's log buffer, the bench's
 * tb_expect_begin marker included.
 */
#define EMU_VLOG_PRINT_FIRST 16
#define EMU_VLOG_PRINT_EVERY 1024

void emu_violation(unsigned int rule, const char *fmt, ...)
{
	struct emu_vrec *r;
	char msg[224];
	va_list ap;
	u64 n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (rule >= NVP2P_EMU_V_COUNT)
		rule = NVP2P_EMU_V_RESERVED9;

	spin_lock(&emu.stat_lock);
	n = ++emu.violations[rule];
	emu.violations_total++;
	r = &vlog[vlog_seq % EMU_VLOG_SIZE];
	r->seq = ++vlog_seq;
	r->rule = rule;
	r->tgid = current->tgid;
	get_task_comm(r->comm, current);
	strscpy(r->msg, msg, sizeof(r->msg));
	spin_unlock(&emu.stat_lock);

	if (n > EMU_VLOG_PRINT_FIRST && n % EMU_VLOG_PRINT_EVERY)
		return;
	pr_err("VIOLATION %s: %s (pid %d %s)\n", rule_names[rule], msg,
	       current->tgid, current->comm);
	if (n == EMU_VLOG_PRINT_FIRST)
		pr_err("VIOLATION %s: %u logged; from now on one line per %u (all are counted: debugfs violations, stats)\n",
		       rule_names[rule], EMU_VLOG_PRINT_FIRST, EMU_VLOG_PRINT_EVERY);
}

void emu_count_call(unsigned int op)
{
	spin_lock(&emu.stat_lock);
	emu.calls[op]++;
	spin_unlock(&emu.stat_lock);
}

/* Adds the time since `t0` (ktime_get_ns()) to the time spent inside the API, in all and by op. */
void emu_account_api_ns(unsigned int op, u64 t0)
{
	u64 took = ktime_get_ns() - t0;

	spin_lock(&emu.stat_lock);
	emu.api_ns += took;
	emu.op_ns[op] += took;
	spin_unlock(&emu.stat_lock);
}

int emu_fail(unsigned int op, int ret)
{
	if (ret) {
		spin_lock(&emu.stat_lock);
		emu.failures[op]++;
		spin_unlock(&emu.stat_lock);
	}
	return ret;
}

/* Returns the errno to inject into this call of op, or 0. */
int emu_fault_check(unsigned int op)
{
	struct emu_fault *f;
	int ret = 0;
	u64 k;

	if (op >= NVP2P_EMU_FAULT_OPS)
		return 0;
	spin_lock(&emu.stat_lock);
	f = &emu.faults[op];
	if (f->mode != NVP2P_EMU_FAULT_OFF) {
		f->count++;
		if (f->count > f->skip) {
			k = f->count - f->skip;
			if (f->mode == NVP2P_EMU_FAULT_ONCE) {
				ret = f->err;
				f->mode = NVP2P_EMU_FAULT_OFF;
			} else if (k % f->n == 0) {
				ret = f->err;
			}
		}
		if (ret)
			f->injected++;
	}
	spin_unlock(&emu.stat_lock);
	if (ret)
		pr_info("injecting %d into op %u\n", ret, op);
	return ret;
}

/*
 * The race-window knobs (cb_delay_ns, cb_after_delay_ns, reg_window_delay_ns,
 * unmap_delay_ns): sleep, so that the racing task gets the CPU inside the window.
 */
void emu_delay_ns(u64 ns)
{
	if (!ns)
		return;
	if (ns < 20 * NSEC_PER_USEC)
		ndelay(ns);
	else
		fsleep(div_u64(ns, NSEC_PER_USEC));
}

/*
 * Spends the modelled RM time `ns`, exactly, and accounts it (model_ns asked,
 * delay_ns spent). The wait is CPU-bound to a ktime deadline, yielding to other
 * runnable tasks as it goes: fsleep() would add up to a quarter of slack plus
 * the wake-up latency (over 100 us in a TCG guest), and a modelled cost must
 * cost what it says. RM's own time is CPU time as well (it polls the GSP for its
 * RPC replies). Sleepable context.
 */
void emu_model_cost(u64 ns)
{
	u64 t0, now;

	if (!ns)
		return;
	t0 = ktime_get_ns();
	if (ns < 20 * NSEC_PER_USEC)
		ndelay(ns);
	else
		do {
			cpu_relax();
			cond_resched();
		} while (ktime_get_ns() - t0 < ns);
	now = ktime_get_ns();
	spin_lock(&emu.stat_lock);
	emu.model_ns += ns;
	emu.delay_ns += now - t0;
	spin_unlock(&emu.stat_lock);
}

void emu_get_config(struct nvp2p_emu_config *cfg)
{
	spin_lock(&emu.stat_lock);
	*cfg = emu.cfg;
	spin_unlock(&emu.stat_lock);
}


int emu_set_config(const struct nvp2p_emu_config *cfg)
{
	unsigned int i;

	if (cfg->pt_abi != 1 && cfg->pt_abi != 2)
		return -EINVAL;
	const u64 delays[] = {
		cfg->cb_delay_ns, cfg->cb_after_delay_ns, cfg->reg_window_delay_ns,
		cfg->unmap_delay_ns, cfg->get_cost_ns, cfg->get_page_cost_ns, cfg->map_cost_ns,
		cfg->map_page_cost_ns, cfg->put_cost_ns, cfg->put_page_cost_ns,
	};

	if (cfg->reserved0)
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(delays); i++)
		if (delays[i] > EMU_MAX_DELAY_NS)
			return -EINVAL;
	spin_lock(&emu.stat_lock);
	emu.cfg = *cfg;
	spin_unlock(&emu.stat_lock);
	return 0;
}

/*
 * Whether the real entry point can return `err` on a call with valid
 * arguments (NVIDIA 595.45.04, kernel-open/nvidia/nv-p2p.c): get_pages and
 * get_pages_persistent pass any RM status through nvidia_p2p_map_status,
 * whose table gives one of six errnos (anything else -EIO); put_pages and
 * put_pages_persistent fail only on an allocation (-ENOMEM) or in RM (the
 * API or GPU lock, -EIO); dma_map_pages adds -EINVAL (no GPU for the uuid)
 * and -ENOTSUPP (topology) to those; dma_unmap_pages fails only on NULL
 * arguments, so no fault is injected there.
 */
static bool emu_real_errno(unsigned int op, int err)
{
	switch (op) {
	case NVP2P_EMU_OP_GET_PAGES:
	case NVP2P_EMU_OP_GET_PAGES_PERSISTENT:
		return err == -EIO || err == -ENOMEM || err == -EINVAL ||
		       err == -ENOTSUPP || err == -EBUSY || err == -ENODEV;
	case NVP2P_EMU_OP_PUT_PAGES:
	case NVP2P_EMU_OP_PUT_PAGES_PERSISTENT:
		return err == -ENOMEM || err == -EIO;
	case NVP2P_EMU_OP_DMA_MAP:
		return err == -ENOMEM || err == -EIO || err == -EINVAL ||
		       err == -ENOTSUPP;
	default:
		return false;
	}
}

int emu_set_fault(struct nvp2p_emu_fault *req)
{
	struct emu_fault *f;

	if (req->op >= NVP2P_EMU_FAULT_OPS || req->pad)
		return -EINVAL;
	switch (req->mode) {
	case NVP2P_EMU_FAULT_OFF:
		break;
	case NVP2P_EMU_FAULT_ONCE:
	case NVP2P_EMU_FAULT_EVERY_N:
		if (req->err >= 0 || req->err < -MAX_ERRNO)
			return -EINVAL;
		if (req->mode == NVP2P_EMU_FAULT_EVERY_N && req->n == 0)
			return -EINVAL;
		if (!emu_real_errno(req->op, req->err)) {
			pr_info("fault %d refused for op %u: the real call never returns it\n",
				req->err, req->op);
			return -EINVAL;
		}
		break;
	default:
		return -EINVAL;
	}
	spin_lock(&emu.stat_lock);
	f = &emu.faults[req->op];
	f->mode = req->mode;
	f->err = req->err;
	f->n = req->n ? req->n : 1;
	f->skip = req->skip;
	f->count = 0;
	req->injected = f->injected;
	spin_unlock(&emu.stat_lock);
	return 0;
}

void emu_fill_stats(struct nvp2p_emu_stats *st)
{
	memset(st, 0, sizeof(*st));
	mutex_lock(&emu.tbl_lock);
	st->live_allocs = emu.live_allocs;
	st->live_pins = emu.live_pins;
	st->live_persistent_pins = emu.live_persistent;
	st->pinned_pages = emu.pinned_pages;
	st->live_mappings = emu.live_maps;
	st->bar1_used = emu.bar1_used;
	st->quarantined = emu.nr_tombs;
	mutex_unlock(&emu.tbl_lock);

	spin_lock(&emu.stat_lock);
	memcpy(st->calls, emu.calls, sizeof(st->calls));
	memcpy(st->failures, emu.failures, sizeof(st->failures));
	memcpy(st->violations, emu.violations, sizeof(st->violations));
	st->violations_total = emu.violations_total;
	st->callbacks = emu.callbacks;
	st->put_after_teardown = emu.put_after_teardown;
	st->free_calls_in_callback = emu.free_calls_in_cb;
	st->api_window_hits = emu.api_window_hits;
	st->api_ns = emu.api_ns;
	st->model_ns = emu.model_ns;
	st->delay_ns = emu.delay_ns;
	spin_unlock(&emu.stat_lock);
}

static void emu_default_config(struct nvp2p_emu_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->pt_abi = pt_abi == 1 ? 1 : 2;
	cfg->bar1_budget = (u64)bar1_budget_mb << 20;
}

void emu_reset(void)
{
	struct nvp2p_emu_config cfg;

	emu_default_config(&cfg);
	emu_tombs_clear();
	spin_lock(&emu.stat_lock);
	emu.cfg = cfg;
	memset(emu.faults, 0, sizeof(emu.faults));
	memset(emu.calls, 0, sizeof(emu.calls));
	memset(emu.failures, 0, sizeof(emu.failures));
	memset(emu.violations, 0, sizeof(emu.violations));
	emu.violations_total = 0;
	emu.callbacks = 0;
	emu.put_after_teardown = 0;
	emu.free_calls_in_cb = 0;
	emu.api_window_hits = 0;
	emu.api_ns = 0;
	emu.model_ns = 0;
	emu.delay_ns = 0;
	memset(emu.op_ns, 0, sizeof(emu.op_ns));
	memset(vlog, 0, sizeof(vlog));
	vlog_seq = 0;
	spin_unlock(&emu.stat_lock);
}

u64 nvp2p_emu_violation_count(void)
{
	u64 v;

	spin_lock(&emu.stat_lock);
	v = emu.violations_total;
	spin_unlock(&emu.stat_lock);
	return v;
}
EXPORT_SYMBOL_GPL(nvp2p_emu_violation_count);

/* ---- debugfs ---- */

static const char *const op_names[NVP2P_EMU_OP_COUNT] = {
	"get_pages", "get_pages_persistent", "put_pages", "put_pages_persistent",
	"dma_map_pages", "dma_unmap_pages", "free_page_table", "free_dma_mapping",
	"init_mapping", "destroy_mapping", "register_rsync_driver",
	"unregister_rsync_driver", "get_rsync_registers", "put_rsync_registers",
};

static int violations_show(struct seq_file *s, void *unused)
{
	struct emu_vrec *copy;
	u64 seq, total, first, i;
	u64 counts[NVP2P_EMU_V_COUNT];
	unsigned int r;

	copy = kmalloc_array(EMU_VLOG_SIZE, sizeof(*copy), GFP_KERNEL);
	if (!copy)
		return -ENOMEM;
	spin_lock(&emu.stat_lock);
	memcpy(copy, vlog, sizeof(vlog));
	seq = vlog_seq;
	total = emu.violations_total;
	memcpy(counts, emu.violations, sizeof(counts));
	spin_unlock(&emu.stat_lock);

	seq_printf(s, "total %llu\n", total);
	for (r = 0; r < NVP2P_EMU_V_COUNT; r++)
		if (counts[r])
			seq_printf(s, "rule %s %llu\n", rule_names[r], counts[r]);
	first = seq > EMU_VLOG_SIZE ? seq - EMU_VLOG_SIZE + 1 : 1;
	for (i = first; i <= seq; i++) {
		struct emu_vrec *v = &copy[(i - 1) % EMU_VLOG_SIZE];

		seq_printf(s, "#%llu %s pid %d (%s): %s\n", v->seq,
			   rule_names[v->rule], v->tgid, v->comm, v->msg);
	}
	kfree(copy);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(violations);

static int stats_show(struct seq_file *s, void *unused)
{
	struct nvp2p_emu_stats *st;
	struct nvp2p_emu_config cfg;
	u64 op_ns[NVP2P_EMU_OP_SLOTS];
	unsigned int i;

	st = kmalloc_obj(*st);
	if (!st)
		return -ENOMEM;
	emu_fill_stats(st);
	spin_lock(&emu.stat_lock);
	memcpy(op_ns, emu.op_ns, sizeof(op_ns));
	spin_unlock(&emu.stat_lock);
	emu_get_config(&cfg);
	for (i = 0; i < NVP2P_EMU_OP_COUNT; i++)
		seq_printf(s, "calls.%s %llu\nfailures.%s %llu\nns.%s %llu\n", op_names[i],
			   st->calls[i], op_names[i], st->failures[i], op_names[i], op_ns[i]);
	seq_printf(s, "violations %llu\nlive_allocs %llu\nlive_pins %llu\n"
		   "live_persistent_pins %llu\npinned_pages %llu\nlive_mappings %llu\n"
		   "callbacks %llu\nput_after_teardown %llu\nbar1_used %llu\n"
		   "bar1_budget %llu\ntombstones %llu\nfree_calls_in_callback %llu\n"
		   "api_window_hits %llu\napi_ns %llu\nmodel_ns %llu\ndelay_ns %llu\npt_abi %u\n",
		   st->violations_total, st->live_allocs, st->live_pins,
		   st->live_persistent_pins, st->pinned_pages, st->live_mappings,
		   st->callbacks, st->put_after_teardown, st->bar1_used,
		   cfg.bar1_budget, st->quarantined, st->free_calls_in_callback,
		   st->api_window_hits, st->api_ns, st->model_ns, st->delay_ns, cfg.pt_abi);
	kfree(st);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(stats);

static int pins_show(struct seq_file *s, void *unused)
{
	struct nvp2p_emu_pin_info *buf;
	u32 n = 0, cap = 4096, i;
	int ret;

	buf = kvcalloc(cap, sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = emu_list(NVP2P_EMU_LIST_PINS, buf, cap, &n);
	if (!ret) {
		for (i = 0; i < min(n, cap); i++)
			seq_printf(s, "pin %llu alloc %llu va 0x%llx len 0x%llx tgid %d %s state %u maps %u\n",
				   buf[i].id, buf[i].alloc_handle, buf[i].va,
				   buf[i].len, buf[i].tgid,
				   buf[i].persistent ? "persistent" : "callback",
				   buf[i].state, buf[i].mappings);
	}
	kvfree(buf);
	return ret;
}
DEFINE_SHOW_ATTRIBUTE(pins);

static int allocs_show(struct seq_file *s, void *unused)
{
	struct nvp2p_emu_alloc_info *buf;
	u32 n = 0, cap = 4096, i;
	int ret;

	buf = kvcalloc(cap, sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = emu_list(NVP2P_EMU_LIST_ALLOCS, buf, cap, &n);
	if (!ret) {
		for (i = 0; i < min(n, cap); i++)
			seq_printf(s, "alloc %llu va 0x%llx size 0x%llx tgid %d flags 0x%x pins %u phys0 0x%llx\n",
				   buf[i].handle, buf[i].va, buf[i].size,
				   buf[i].tgid, buf[i].flags, buf[i].pins,
				   buf[i].first_phys);
	}
	kvfree(buf);
	return ret;
}
DEFINE_SHOW_ATTRIBUTE(allocs);

static int __init nvp2p_emu_init(void)
{
	int ret;

	if (pt_abi != 1 && pt_abi != 2) {
		pr_err("pt_abi must be 1 or 2\n");
		return -EINVAL;
	}
	hash_init(emu.pt_hash);
	hash_init(emu.map_hash);
	hash_init(emu.tomb_hash);
	get_random_bytes(emu.gpu_uuid, sizeof(emu.gpu_uuid));
	emu_default_config(&emu.cfg);

	emu_debugfs = debugfs_create_dir("nvp2p_emu", NULL);
	debugfs_create_file("violations", 0444, emu_debugfs, NULL, &violations_fops);
	debugfs_create_file("stats", 0444, emu_debugfs, NULL, &stats_fops);
	debugfs_create_file("pins", 0444, emu_debugfs, NULL, &pins_fops);
	debugfs_create_file("allocs", 0444, emu_debugfs, NULL, &allocs_fops);

	ret = emu_dev_init();
	if (ret) {
		debugfs_remove_recursive(emu_debugfs);
		return ret;
	}
	pr_info("loaded: page table ABI %s, BAR1 budget %lu MiB\n",
		pt_abi == 1 ? "0x00010002" : "0x00020000", bar1_budget_mb);
	return 0;
}

static void __exit nvp2p_emu_exit(void)
{
	emu_dev_exit();
	/*
	 * Client modules that linked against us are gone; open fds hold a
	 * module reference, so nothing can call in any more.
	 */
	emu_teardown_all();
	emu_tombs_clear();
	debugfs_remove_recursive(emu_debugfs);
	pr_info("unloaded (%llu violations)\n", emu.violations_total);
}

module_init(nvp2p_emu_init);
module_exit(nvp2p_emu_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test bench: strict emulator of the NVIDIA P2P (GPUDirect RDMA) provider API");
MODULE_AUTHOR("nvpeer project");
