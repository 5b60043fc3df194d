/* The launcher's additions to its ranks' environment: see rank_env.h. */
#include "config.h"
#include "src/launch/rank_env.h"
#include "src/base/util.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The preload library beside libsfb: in libdir/sfb/ once installed (a
 * private directory: no soname, not for linking), next to libsfb.so in a
 * build tree and in the Python package of a wheel (pip install). */
static const char *const preload_paths[] = {"sfb/libsfb-spin-yield.so", "libsfb-spin-yield.so"};

/* The directory of the libsfb.so this code runs in, into lib (realpath) and
 * dir; 0 when it is linked into a program instead (tests). */
static int own_library(char lib[PATH_MAX], char dir[PATH_MAX])
{
    Dl_info info;
    /* an object of this file (ISO C has no function-to-object cast) */
    if (!dladdr(preload_paths, &info) || !info.dli_fname) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    if (strncmp(base, "libsfb.so", 9) != 0 || !realpath(info.dli_fname, lib)) return 0;
    snprintf(dir, PATH_MAX, "%s", lib);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    return 1;
}

static char *preload_list(const char *dir)
{
    char path[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof preload_paths / sizeof preload_paths[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, preload_paths[i]);
        if (access(path, R_OK) != 0) continue;
        const char *old = getenv("LD_PRELOAD");
        char *list = NULL;
        if (asprintf(&list, "%s%s%s", old && *old ? old : "", old && *old ? " " : "", path) < 0)
            return NULL;
        return list;
    }
    SFB_LOG_D("launch: no libsfb-spin-yield.so beside libsfb in %s: exec'd ranks spin", dir);
    return NULL;
}

void sfb__rank_env_prepare(struct sfb__rank_env *e, int nprocs, int exec)
{
    *e = (struct sfb__rank_env){0};
    char lib[PATH_MAX], dir[PATH_MAX];
    int have_lib = own_library(lib, dir);
    const char *set = getenv("SFB_LIB");
    if (have_lib && !(set && *set)) e->lib = strdup(lib);

    unsigned cpus = sfb__cpus_allowed();
    const char *forced = getenv("SFB_SPIN_YIELD");
    int yield = forced && *forced ? strcmp(forced, "0") != 0 : (unsigned)nprocs > cpus;
    if (!yield) return;
    e->spin = "1";
    if (exec && have_lib) e->preload = preload_list(dir);
    SFB_LOG_D("launch: %d ranks on %u CPUs: spin locks yield%s%s", nprocs, cpus,
              e->preload ? "; LD_PRELOAD=" : "", e->preload ? e->preload : "");
}

void sfb__rank_env_apply(const struct sfb__rank_env *e, int exec)
{
    /* a launcher started by a rank: its ranks are not that rank's children
     * (sfb.Job refuses a process whose SFB_RANK_PID is another's) */
    unsetenv("SFB_RANK_PID");
    if (e->lib) setenv("SFB_LIB", e->lib, 1);
    if (e->spin) setenv("SFB_SPIN_YIELD", e->spin, 1);
    if (exec && e->preload) setenv("LD_PRELOAD", e->preload, 1);
}

void sfb__rank_env_free(struct sfb__rank_env *e)
{
    free(e->lib);
    free(e->preload);
    *e = (struct sfb__rank_env){0};
}
