// SPDX-License-Identifier: GPL-2.0
/*
 * pme_selftest: a tiny peer-memory client used by the bench suite
 * 11-core-emu to check peer_mem_emu's registration rules.  At load it
 * registers the clients described by the "clients" parameter and publishes
 * what ib_register_peer_memory_client returned in the read-only "result"
 * parameter; at unload it unregisters the ones that were accepted.
 *
 * clients=SPEC[,SPEC...]   (at most 8), SPEC = NAME[:TOKEN...], tokens:
 *   inv          pass an invalidate pointer (else NULL)
 *   ex           extended client with PEER_MEM_INVALIDATE_UNMAPS
 *   ex0          extended client, flags 0
 *   exsmall      ex_size 144 (< offsetofend(flags)): not extended
 *   nobyte15     ex_size 152 + UNMAPS but version byte 15 zero: not extended
 *   missing=OP   leave OP NULL (acquire get_pages put_pages dma_map dma_unmap
 *                get_page_size release)
 *   ver=STRING   version string (default "1.0")
 *   modify       change the struct after registration (must be reported)
 *   mem          claim ranges of /dev/pme_selftest_mem mappings (see mem.c)
 *
 * result: "NAME=ok|null/inv-set|inv-untouched|inv-none;" per client.
 * Without "mem" acquire never claims memory.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <rdma/peer_mem.h>
#include "st.h"

#define ST_MAX 8

static char *clients[ST_MAX];
static int nclients;
module_param_array(clients, charp, &nclients, 0444);
MODULE_PARM_DESC(clients, "client specs, see the file header");

static char result[ST_MAX * 96];
module_param_string(result, result, sizeof(result), 0444);
MODULE_PARM_DESC(result, "outcome per client (read-only)");

static struct st_client *st[ST_MAX];

static int st_acquire(unsigned long addr, size_t size, void *priv, char *name,
		      void **ctx)
{
	return 0;
}

static int st_get_pages(unsigned long addr, size_t size, int write, int force,
			struct sg_table *sg, void *ctx, u64 core_context)
{
	return -EINVAL;
}

static int st_dma_map(struct sg_table *sg, void *ctx, struct device *dev,
		      int dmasync, int *nmap)
{
	return -EINVAL;
}

static int st_dma_unmap(struct sg_table *sg, void *ctx, struct device *dev)
{
	return 0;
}

static void st_put_pages(struct sg_table *sg, void *ctx)
{
}

static unsigned long st_page_size(void *ctx)
{
	return PAGE_SIZE;
}

static void st_release(void *ctx)
{
}

/* sentinel: proves the core did not write *inv for a rejected client */
static int st_sentinel(void *reg_handle, u64 core_context)
{
	return 0;
}

static int st_apply_token(struct st_client *c, const char *tok, bool *pass_inv)
{
	struct peer_memory_client *p = &c->ex.client;

	if (!strcmp(tok, "inv")) {
		*pass_inv = true;
	} else if (!strcmp(tok, "ex") || !strcmp(tok, "ex0")) {
		p->version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		c->ex.ex_size = sizeof(c->ex);
		c->ex.flags = strcmp(tok, "ex") ? 0 : PEER_MEM_INVALIDATE_UNMAPS;
	} else if (!strcmp(tok, "exsmall")) {
		p->version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		c->ex.ex_size = offsetof(struct peer_memory_client_ex, flags);
		c->ex.flags = PEER_MEM_INVALIDATE_UNMAPS;
	} else if (!strcmp(tok, "nobyte15")) {
		c->ex.ex_size = sizeof(c->ex);
		c->ex.flags = PEER_MEM_INVALIDATE_UNMAPS;
	} else if (!strncmp(tok, "ver=", 4)) {
		if (strlen(tok + 4) > IB_PEER_MEMORY_VER_MAX - 2)
			return -EINVAL;
		strscpy(p->version, tok + 4, IB_PEER_MEMORY_VER_MAX - 1);
	} else if (!strcmp(tok, "modify")) {
		c->modify = true;
	} else if (!strcmp(tok, "mem")) {
		st_mem_ops(p);
	} else if (!strcmp(tok, "missing=acquire")) {
		p->acquire = NULL;
	} else if (!strcmp(tok, "missing=get_pages")) {
		p->get_pages = NULL;
	} else if (!strcmp(tok, "missing=put_pages")) {
		p->put_pages = NULL;
	} else if (!strcmp(tok, "missing=dma_map")) {
		p->dma_map = NULL;
	} else if (!strcmp(tok, "missing=dma_unmap")) {
		p->dma_unmap = NULL;
	} else if (!strcmp(tok, "missing=get_page_size")) {
		p->get_page_size = NULL;
	} else if (!strcmp(tok, "missing=release")) {
		p->release = NULL;
	} else {
		return -EINVAL;
	}
	return 0;
}

static int st_build(struct st_client *c, char *spec, bool *pass_inv)
{
	struct peer_memory_client *p = &c->ex.client;
	char *tok, *name;
	int ret;

	name = strsep(&spec, ":");
	if (!name || strlen(name) >= IB_PEER_MEMORY_NAME_MAX)
		return -EINVAL;
	strscpy(p->name, name, sizeof(p->name));
	strscpy(p->version, "1.0", sizeof(p->version));
	p->acquire = st_acquire;
	p->get_pages = st_get_pages;
	p->dma_map = st_dma_map;
	p->dma_unmap = st_dma_unmap;
	p->put_pages = st_put_pages;
	p->get_page_size = st_page_size;
	p->release = st_release;
	while ((tok = strsep(&spec, ":"))) {
		ret = st_apply_token(c, tok, pass_inv);
		if (ret) {
			pr_err("pme_selftest: bad token \"%s\"\n", tok);
			return ret;
		}
	}
	return 0;
}

static void st_cleanup(void)
{
	int i;

	for (i = ST_MAX - 1; i >= 0; i--) {
		if (!st[i])
			continue;
		if (st[i]->handle)
			ib_unregister_peer_memory_client(st[i]->handle);
		if (st_mem_client == st[i])
			st_mem_client = NULL;
		kfree(st[i]);
		st[i] = NULL;
	}
}

static int __init st_init(void)
{
	size_t off = 0;
	int i, ret;

	ret = st_mem_init();
	if (ret)
		return ret;
	for (i = 0; i < nclients; i++) {
		char *spec = kstrdup(clients[i], GFP_KERNEL);
		bool pass_inv = false;
		const char *inv_state;
		struct st_client *c;

		c = kzalloc_obj(*c);
		if (!c || !spec) {
			kfree(c);
			kfree(spec);
			ret = -ENOMEM;
			goto err;
		}
		st[i] = c;
		ret = st_build(c, spec, &pass_inv);
		kfree(spec);
		if (ret)
			goto err;
		c->inv = st_sentinel;
		c->handle = ib_register_peer_memory_client(&c->ex.client,
							   pass_inv ? &c->inv : NULL);
		c->invalidating = pass_inv && c->handle;
		if (c->handle && c->ex.client.acquire != st_acquire)
			st_mem_client = c;	/* the (single) memory-claiming client */
		if (!pass_inv)
			inv_state = "inv-none";
		else if (c->inv == st_sentinel)
			inv_state = "inv-untouched";
		else if (c->inv)
			inv_state = "inv-set";
		else
			inv_state = "inv-null";
		off += scnprintf(result + off, sizeof(result) - off, "%s=%s/%s;",
				 c->ex.client.name, c->handle ? "ok" : "null",
				 inv_state);
		if (c->handle && c->modify)
			c->ex.client.version[0] ^= 0x20;
	}
	pr_info("pme_selftest: %s\n", result);
	return 0;
err:
	st_cleanup();
	st_mem_exit();
	return ret;
}

static void __exit st_exit(void)
{
	st_cleanup();
	st_mem_exit();
}

module_init(st_init);
module_exit(st_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test bench: registration self-test client for peer_mem_emu");
