/* The open-file limit for a job of P ranks (src/base/fdlimit.h). Launchers
 * of large jobs raise it the same way: Linux's default soft limit is 1024,
 * and full P2P over tcp at P = 512 needs more. */
#include "config.h"
#include "src/base/fdlimit.h"
#include "src/base/util.h"

#include <stdatomic.h>
#include <sys/resource.h>

#define FD_PER_RANK 4
#define FD_SPARE 256

unsigned long sfb__fd_limit_want(uint32_t world)
{
    return FD_PER_RANK * (unsigned long)world + FD_SPARE;
}

unsigned long sfb__fd_limit_raise(uint32_t world, int loud)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rlim_t want = sfb__fd_limit_want(world);
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            SFB_LOG_D("descriptor limit raised from %lu to %lu for %u ranks", (unsigned long)was,
                      (unsigned long)rl.rlim_cur, world);
        else
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    static atomic_int said;
    if (rl.rlim_cur < want && !atomic_exchange(&said, 1)) {
        const char *fmt = "open files: the limit is %lu (hard limit %lu), below the %lu that a "
                          "rank of a job of %u ranks plans for (4 per rank + 256); raise "
                          "`ulimit -n` to %lu on every host (the hard limit: limits.conf nofile, "
                          "docker run --ulimit nofile=N)";
        unsigned long cur = (unsigned long)rl.rlim_cur, max = (unsigned long)rl.rlim_max;
        if (loud) SFB_LOG_W(fmt, cur, max, (unsigned long)want, world, (unsigned long)want);
        else SFB_LOG_D(fmt, cur, max, (unsigned long)want, world, (unsigned long)want);
    }
    return (unsigned long)rl.rlim_cur;
}
