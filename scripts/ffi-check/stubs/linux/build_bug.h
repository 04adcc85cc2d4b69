/* The offsetofend/static_assert stand-ins live in stddef.h. */
#include <linux/stddef.h>
