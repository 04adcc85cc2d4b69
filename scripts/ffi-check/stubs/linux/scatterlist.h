#include <linux/types.h>
struct sg_table;
struct scatterlist;
