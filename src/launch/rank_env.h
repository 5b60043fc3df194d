/* What the local launcher adds to its ranks' environment besides the
 * rendezvous (src/launch/launch_internal.h): the libsfb it runs on, and on an
 * oversubscribed host the yielding spin lock of src/launch/spin_yield.h. */
#ifndef SFB_SRC_RANK_ENV_H
#define SFB_SRC_RANK_ENV_H

struct sfb__rank_env {
    /* SFB_LIB: the absolute path of the libsfb this process runs on, for
     * programs that load it by path (the Python module); NULL when the
     * launcher is not running from libsfb.so or SFB_LIB is set already. */
    char *lib;
    /* SFB_SPIN_YIELD for the ranks: "1" when they yield, NULL to leave the
     * environment as it is. */
    const char *spin;
    /* LD_PRELOAD for exec'd ranks (the caller's list plus
     * libsfb-spin-yield.so), or NULL. */
    char *preload;
};

/* Decides, in the launcher before its first fork, for nprocs ranks on this
 * host: they yield when there are more of them than this process may use
 * CPUs, or as SFB_SPIN_YIELD=0/1 says. Never fails (what it cannot find or
 * allocate is left out; the ranks then spin as libc's lock does). */
void sfb__rank_env_prepare(struct sfb__rank_env *e, int nprocs, int exec);
/* In a rank between fork and exec (setenv only). */
void sfb__rank_env_apply(const struct sfb__rank_env *e, int exec);
void sfb__rank_env_free(struct sfb__rank_env *e);

#endif
