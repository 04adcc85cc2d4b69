#include <linux/types.h>
#ifndef offsetof
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif
#ifndef offsetofend
#define offsetofend(t, m) (offsetof(t, m) + sizeof(((t *)0)->m))
#endif
#ifndef static_assert
#define static_assert(e, ...) _Static_assert(e, #e)
#endif
