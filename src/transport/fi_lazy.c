/* libfabric, loaded when a transport first needs it, not when libsfb is.
 *
 * libsfb calls five functions of libfabric's (the rest of its API is
 * inline, through the objects these return); they are defined here, hidden,
 * and forward to libfabric loaded with dlopen on the first call. Two
 * reasons, both from what Debian's libfabric pulls in with its psm
 * provider: libinfinipath's constructor calibrates a timer by sleeping
 * 100 ms (every process that loads libsfb paid ~0.2 s before main(): the
 * launcher, `sfb --help`, a Python program that imports sfb), and it and
 * libpsm2's install handlers for SIGINT, SIGTERM, SIGSEGV and more that
 * print a backtrace and exit(1): Ctrl-C in a Python program that had
 * loaded libsfb ended it with status 1 (no KeyboardInterrupt, no finally
 * blocks), a worker's launcher never heard of the signal, and an exit()
 * from a handler deadlocks where the signal interrupted a holder of a lock
 * an exit handler takes (libfabric's destructor inside fi_getinfo,
 * OpenBLAS's while a launcher forks). The load keeps every disposition the
 * process had: saved before, put back after. (libfabric's shm provider
 * installs its own later, at the fabric's open: it removes its
 * shared-memory regions and re-raises with the disposition it found.) */
#include "src/base/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define FI_LIBRARY "libfabric.so.1"

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} fi;
static pthread_once_t fi_once = PTHREAD_ONCE_INIT;
static char fi_why[256]; /* why it could not be loaded */

/* Over tcp, Debian's libfabric (1.17) gives ofi_rxm a shared receive
 * context of 4096 bounce buffers of 16 KiB, touched at the endpoint's open:
 * ~120 MB of every rank's memory and ~0.4 s of its start in page faults,
 * for the unexpected messages that sfb's posted receives leave few of.
 * 128 instead (rxm's own size per connection where it has no shared
 * context: verbs' default, unchanged), unless the user chose the size or
 * the context. Set before libfabric is loaded: it reads its variables once. */
static void rxm_defaults(void)
{
    if (!getenv("FI_OFI_RXM_MSG_RX_SIZE") && !getenv("FI_OFI_RXM_USE_SRX"))
        setenv("FI_OFI_RXM_MSG_RX_SIZE", "128", 0);
}

static void fi_load(void)
{
    static const int sigs[] = SFB_TAKEN_SIGNALS;
    rxm_defaults();
    struct sigaction saved[SFB_ARRAY_LEN(sigs)];
    int have[SFB_ARRAY_LEN(sigs)];
    for (size_t i = 0; i < SFB_ARRAY_LEN(sigs); i++)
        have[i] = sigaction(sigs[i], NULL, &saved[i]) == 0;
    void *h = dlopen(FI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; i < SFB_ARRAY_LEN(sigs); i++)
        if (have[i]) sigaction(sigs[i], &saved[i], NULL);
    if (!h) {
        const char *e = dlerror();
        snprintf(fi_why, sizeof fi_why, "libfabric cannot be loaded: %s", e ? e : FI_LIBRARY);
        return;
    }
    /* (never closed: providers keep threads and handlers until exit) */
    *(void **)&fi.getinfo = dlsym(h, "fi_getinfo");
    *(void **)&fi.freeinfo = dlsym(h, "fi_freeinfo");
    *(void **)&fi.dupinfo = dlsym(h, "fi_dupinfo");
    *(void **)&fi.fabric = dlsym(h, "fi_fabric");
    *(void **)&fi.strerror = dlsym(h, "fi_strerror");
    if (!fi.getinfo || !fi.freeinfo || !fi.dupinfo || !fi.fabric || !fi.strerror) {
        snprintf(fi_why, sizeof fi_why, "%s lacks one of fi_getinfo, fi_freeinfo, fi_dupinfo, "
                 "fi_fabric, fi_strerror", FI_LIBRARY);
        fi.getinfo = NULL;
    }
}

/* 1 when libfabric is loaded (loading it on the first call). */
static int fi_ready(void)
{
    pthread_once(&fi_once, fi_load);
    return fi.getinfo != NULL;
}

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info)
{
    /* (not loaded: the caller's fi_strerror says why) */
    return fi_ready() ? fi.getinfo(version, node, service, flags, hints, info) : -FI_ENOSYS;
}

void fi_freeinfo(struct fi_info *info)
{
    if (info && fi_ready()) fi.freeinfo(info);
}

struct fi_info *fi_dupinfo(const struct fi_info *info)
{
    return fi_ready() ? fi.dupinfo(info) : NULL;
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    return fi_ready() ? fi.fabric(attr, fabric, context) : -FI_ENOSYS;
}

const char *fi_strerror(int errnum)
{
    return fi_ready() ? fi.strerror(errnum) : fi_why;
}
