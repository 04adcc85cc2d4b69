/* SPDX-License-Identifier: GPL-2.0 */
/* pme_selftest: shared declarations of the self-test client files. */
#ifndef PME_ST_H
#define PME_ST_H

#include <rdma/peer_mem.h>

struct st_client {
	struct peer_memory_client_ex ex;
	invalidate_peer_memory inv;
	void *handle;
	bool modify;
	bool invalidating;
};

/* mem.c: the memory-claiming client */
extern struct st_client *st_mem_client;
void st_mem_ops(struct peer_memory_client *p);
int st_mem_init(void);
void st_mem_exit(void);

#endif
