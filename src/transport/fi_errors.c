/* libfabric's error codes (FI_ERRNO_OFFSET = 256 up to sfb's own codes) named
 * for sfb_strerror. The base layer must not know libfabric, so the network
 * layer hands it this namer; a load-time constructor does it, so every program
 * that links the library (shared, or the tests' static archive, linked whole)
 * names them before its first call. */
#include "src/base/util.h"

#include <rdma/fi_errno.h>

static const char *fi_name(int code)
{
    return fi_strerror(code);
}

__attribute__((constructor)) static void register_fi_names(void)
{
    sfb__error_names_register(FI_ERRNO_OFFSET, SFB_ERR_BASE, fi_name);
}
