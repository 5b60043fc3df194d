/* Placeholder until the topology module lands. */
#include "src/cli/topo.h"

#include <stdio.h>

int sfb_cli_topo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "sfb topo: not available in this version (the topology simulator is "
                    "planned; see README \"Status\")\n");
    return 2;
}
