/* Prints "NAME SIZE" and "NAME.FIELD OFFSET" of the job API's structures,
 * for test/python/test_sfb.py to compare with python/sfb's ctypes mirror. */
#include <sfb/job.h>

#include <stddef.h>
#include <stdio.h>

#define SIZE(t) printf("%s %zu\n", #t, sizeof(struct t))
#define OFF(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f))

int main(void)
{
    SIZE(sfb_job_settings);
    OFF(sfb_job_settings, rendezvous);
    OFF(sfb_job_settings, heartbeat_s);
    OFF(sfb_job_settings, bandwidth);
    OFF(sfb_job_settings, reserved);
    SIZE(sfb_matrix);
    OFF(sfb_matrix, data);
    SIZE(sfb_job_attach);
    OFF(sfb_job_attach, max_s);
    OFF(sfb_job_attach, engine);
    OFF(sfb_job_attach, staleness);
    OFF(sfb_job_attach, topology);
    OFF(sfb_job_attach, start_clock);
    OFF(sfb_job_attach, link_gbps);
    OFF(sfb_job_attach, sf_bytes);
    OFF(sfb_job_attach, priority);
    OFF(sfb_job_attach, reserved);
    SIZE(sfb_sf);
    OFF(sfb_sf, clock);
    OFF(sfb_sf, scale);
    OFF(sfb_sf, b);
    OFF(sfb_sf, c_val);
    OFF(sfb_sf, nz_cap);
    SIZE(sfb_job_clock);
    OFF(sfb_job_clock, wait_s);
    OFF(sfb_job_clock, min_applied);
    OFF(sfb_job_clock, budget_wait_s);
    SIZE(sfb_job_stats);
    OFF(sfb_job_stats, bytes_sent);
    OFF(sfb_job_stats, rejected_frames);
    OFF(sfb_job_stats, queued_bytes);
    OFF(sfb_job_stats, budget_held_s);
    OFF(sfb_job_stats, publish_wait_s);
    return 0;
}
