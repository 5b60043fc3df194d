/* Cross-check against scripts/topo_check.py, an independent pure-Python
 * implementation of the offsets (exact fractions) with its own BFS over the
 * explicit edge list. Exits 77 (skip) without python3. */
#include <sfb/sfb.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TOPO_CHECK_PY
#define TOPO_CHECK_PY "scripts/topo_check.py"
#endif

static int compare(const char *args, unsigned *lines)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s' %s", TOPO_CHECK_PY, args);
    FILE *f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "cannot run %s\n", cmd);
        return 1;
    }
    char line[1 << 16];
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        char name[32];
        unsigned P, Q, deg, conn, diam;
        unsigned long long sum;
        int used;
        if (sscanf(line, "%31s %u %u %u %u %u %llu%n", name, &P, &Q, &deg, &conn, &diam, &sum, &used) != 7) {
            fprintf(stderr, "unparsable line: %s", line);
            bad = 1;
            break;
        }
        (*lines)++;
        struct sfb_topo *t;
        int r = sfb_topo_open(&t, name, P, Q);
        if (r) {
            fprintf(stderr, "%s P=%u Q=%u: open: %s\n", name, P, Q, sfb_last_error());
            bad = 1;
            continue;
        }
        uint32_t q = sfb_topo_out_degree(t);
        int ok = conn == 1 && q == deg && diam == sfb_topo_diameter(t);
        /* sum over ordered pairs = mean · P · (P−1), exact in a double here */
        double want = (double)sum, got = sfb_topo_mean_hops(t) * (double)P * (P - 1);
        if (fabs(want - got) > 1e-6 * (want + 1)) ok = 0;
        const char *p = line + used;
        for (uint32_t k = 0; k < q && ok; k++) {
            char *end;
            unsigned long o = strtoul(p, &end, 10);
            if (end == p || o != sfb_topo_offset(t, k)) ok = 0;
            p = end;
        }
        if (!ok) {
            fprintf(stderr, "MISMATCH %s P=%u Q=%u: python degree %u conn %u diam %u sum %llu; "
                            "C degree %u diam %u sum %.0f\n  python: %s",
                    name, P, Q, deg, conn, diam, sum, q, sfb_topo_diameter(t), got, line);
            bad = 1;
        }
        sfb_topo_close(&t);
    }
    int st = pclose(f);
    if (st != 0) {
        fprintf(stderr, "%s exited with status %d\n", cmd, st);
        bad = 1;
    }
    return bad;
}

int main(void)
{
    if (system("python3 -c 'import fractions' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "python3 not available: skipped\n");
        return 77;
    }
    unsigned lines = 0;
    int bad = 0;
    /* DESIGN's sizes, powers of two and their neighbours, primes, odd sizes;
     * default degree, the ring, and the Q > L regime. */
    bad |= compare("--topology halton,halton-classic --nodes 2:40,63,64,65,100,127,128,129,"
                   "255,256,257,500,729,1000,1023,1024,1025,2187,4095,4096,4097,10000 "
                   "--degree 0,1,2,3",
                   &lines);
    bad |= compare("--topology halton,halton-classic --nodes 16,27,64,81,243,1000,1024,4096 "
                   "--degree 7,9,12,14,16",
                   &lines);
    bad |= compare("--topology full --nodes 1,2,3,16,100,300", &lines);
    fprintf(stderr, "%u (topology, P, Q) cases compared with %s\n", lines, TOPO_CHECK_PY);
    if (lines < 300) {
        fprintf(stderr, "too few cases compared\n");
        bad = 1;
    }
    return bad ? 1 : 0;
}
