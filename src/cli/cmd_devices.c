/* cmd_devices.c: `ctrain devices`: whether CUDA is usable here, and why not.
 * Exits 0 on a machine without a GPU: that is an answer, not an error. */
#include <stdio.h>

#include "backend/device.h"
#include "cli/cli.h"

int ct_cmd_devices(int argc, char **argv, ct_err *err) {
    const char *pos[1];
    int npos, rc = ct_parse_args("devices", argc, argv, NULL, 0, pos, 0, &npos, err);
    if (rc) return rc;
    int count = 0;
    char why[256];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    printf("CUDA available: %s\n", usable ? "yes" : "no");
    if (!usable) printf("Reason: %s\n", why);
    printf("CUDA devices: %d\n", count);
    printf("Training devices: cpu (oneDNN)\n");
    return CT_EXIT_OK;
}
