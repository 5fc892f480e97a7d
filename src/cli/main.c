/* The bitrank program: subcommands. */
#include <stdio.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out, "usage: bitrank <command> [options]\n"
                 "\n"
                 "Compress the linear layers of an LLM checkpoint into binary low-rank form.\n"
                 "\n"
                 "commands:\n"
                 "  compress         compress a checkpoint's linear layers: compress IN -o OUT\n"
                 "  demo             run the main job on the embedded default and print its table\n"
                 "  devices          list the CPU, each usable CUDA GPU and each Vulkan device\n"
                 "  inspect FILE     list a safetensors file's tensors and compressed layers\n"
                 "  version          print the version\n"
                 "  help, --help     this text\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("bitrank %s\n", BITRANK_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "devices")) return br_cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "compress")) return br_cmd_compress(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return br_cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return br_cmd_inspect(argc - 1, argv + 1);
    fprintf(stderr, "bitrank: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
