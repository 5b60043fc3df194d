#include "sfb/sfb.h"
#include "src/cli/topo.h" /* TEMPORARY (branch topo): the lead wires real dispatch */
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "topo") == 0) return sfb_cli_topo(argc - 1, argv + 1);
    printf("sfb %s\n", sfb_version());
    return 0;
}
