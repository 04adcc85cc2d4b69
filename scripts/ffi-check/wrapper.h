#include <linux/types.h>
#include <rdma/peer_mem.h>
#include <nv-p2p.h>
