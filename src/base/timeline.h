/* Set-up and teardown timeline of one worker process: CLOCK_MONOTONIC
 * (sfb__now) stamps of the phases of a run, so that "launch to first
 * clock" and "last clock to exit" can be split into their parts. One worker
 * per process (the bootstrap is process-global too), marked from the thread
 * that runs the worker; the metrics events "setup" and "teardown"
 * (docs/formats.md) carry them, and debug logging prints each as it ends.
 *
 * The origin of "launch": SFB_LAUNCH_T0, the launcher's CLOCK_MONOTONIC
 * just before it forked rank 0 (sfb run sets it; CLOCK_MONOTONIC is one
 * clock for every process of a host), else this process's start time
 * (/proc/self/stat, 10 ms resolution), so under mpirun/srun the launch
 * phase is the process start only. */
#ifndef SFB_SRC_TIMELINE_H
#define SFB_SRC_TIMELINE_H

#include <stddef.h>

/* In order; each phase ends at its mark and starts at the previous mark. */
enum sfb__phase {
    SFB__PH_LAUNCH,      /* origin (see above) */
    SFB__PH_EXEC,        /* the process started (fork + exec) */
    SFB__PH_MAIN,        /* the worker was entered (dynamic loading, option parsing) */
    SFB__PH_BOOT,        /* bootstrap open: rendezvous connected, every rank joined */
    SFB__PH_HOSTS,       /* host / pid / provider exchange */
    SFB__PH_FABRIC,      /* libfabric: fi_getinfo, fabric, domain, endpoint */
    SFB__PH_NAMES,       /* endpoint name allgather and fi_av_insert */
    SFB__PH_READY,       /* progress thread started and the barrier after it */
    SFB__PH_DATA,        /* data loaded, model and sampler built */
    SFB__PH_AGREE,       /* settings compared across ranks */
    SFB__PH_SHAPES,      /* frame shapes set, barrier */
    SFB__PH_ENGINE,      /* sync engine and metrics opened */
    SFB__PH_FIRST_CLOCK, /* the first clock began */
    /* teardown */
    SFB__PH_LAST_CLOCK,  /* the last clock's update was published */
    SFB__PH_DRAINED,     /* every update of every clock applied */
    SFB__PH_FLUSHED,     /* every frame of this rank delivered */
    SFB__PH_BYE,         /* BYE sent to every peer and delivered */
    SFB__PH_FINAL,       /* the final barrier */
    SFB__PH_REPORTED,    /* evaluation, summary, model file */
    SFB__PH_CLOSED,      /* engine, transport, progress thread, bootstrap closed */
    SFB__PH_COUNT
};

/* Stamps `ph` with sfb__now() (and logs, at debug level, the phase that
 * ended). A second mark of a phase overwrites the first. */
void sfb__phase_mark(enum sfb__phase ph);
/* The stamp of `ph`, 0 if it was never marked. */
double sfb__phase_at(enum sfb__phase ph);
const char *sfb__phase_name(enum sfb__phase ph);
/* 1 when the launch origin is the launcher's SFB_LAUNCH_T0, 0 when it is
 * this process's start. */
int sfb__phase_from_launcher(void);
/* Forgets every mark and takes the launch origin and the process start
 * again (a process that runs several workers one after another). */
void sfb__phase_reset(void);
/* Writes into buf (JSON members, no braces) "name":seconds for every marked
 * phase in [from, to], each the time since the closest earlier marked
 * phase; returns buf. */
char *sfb__phase_json(enum sfb__phase from, enum sfb__phase to, char *buf, size_t len);
/* The seconds between two marks, or -1 where one is missing. */
double sfb__phase_span(enum sfb__phase from, enum sfb__phase to);

/* The environment variable a launcher sets to its CLOCK_MONOTONIC. */
#define SFB__LAUNCH_T0_ENV "SFB_LAUNCH_T0"

#endif
