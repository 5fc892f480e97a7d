/* Subcommands of the bitrank program: each takes its own argv (argv[0] is the
 * subcommand's name) and returns the process exit status. */
#ifndef BR_CLI_COMMANDS_H
#define BR_CLI_COMMANDS_H

int br_cmd_devices(int argc, char **argv);
int br_cmd_demo(int argc, char **argv);
int br_cmd_inspect(int argc, char **argv);
int br_cmd_compress(int argc, char **argv);

#endif
