/* libfuzzer_main.c: libFuzzer's entry for one target, named at compile time by
 * CT_FUZZ_TARGET (tests/fuzz/meson.build). A broken contract (targets.h) aborts,
 * which libFuzzer reports as a crash and saves the input for. */
#include <stdio.h>
#include <stdlib.h>

#include "targets.h"

#define CT_STR(x) CT_STR_(x)
#define CT_STR_(x) #x

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[2048];
    if (CT_FUZZ_TARGET(data, size, why, sizeof why) == CT_FUZZ_BROKEN) {
        fprintf(stderr, "%s: contract broken: %s\n", CT_STR(CT_FUZZ_TARGET), why);
        abort();
    }
    return 0;
}
