#include <linux/types.h>
struct device;
