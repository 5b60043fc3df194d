/* libfabric transport. The only module that includes <rdma/fabric.h>. */
#include "config.h"
#include "src/common.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

const char *sfb__fi_strerror(int code)
{
    return fi_strerror(code);
}
