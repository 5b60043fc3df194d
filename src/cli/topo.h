/* `sfb topo`: topology analysis and one-clock simulation (public API only). */
#ifndef SFB_CLI_TOPO_H
#define SFB_CLI_TOPO_H

/* argv[0] is the subcommand name ("topo"); options follow. Prints to
 * stdout/stderr. Returns the process exit status: 0, 1 (failure), 2 (usage). */
int sfb_cli_topo(int argc, char **argv);

#endif
