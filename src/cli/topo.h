#ifndef SFB_CLI_TOPO_H
#define SFB_CLI_TOPO_H
/* `sfb topo`: argv[0] is "topo". Returns the process exit code. */
int sfb_cli_topo(int argc, char **argv);
#endif
