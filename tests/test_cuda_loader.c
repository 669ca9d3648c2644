/* test_cuda_loader.c: loading libctrain-cuda.so and its ABI check
 * (backend/cuda_loader.h, backend/cuda/cuda_api.h "ABI check").
 *
 * This program does not link the CUDA backend library; it loads, through
 * ct_cuda_api_open:
 *   - the library this build made (next to ctrain): accepted, its table complete;
 *   - a library without the ABI symbol (an older build, fake_cuda_old.so) and one
 *     with another fingerprint (fake_cuda_other.so): refused with a one-line
 *     reason naming the path, before their entry point runs (it aborts);
 *   - a missing file: refused with the loader's message.
 * Loading needs no GPU, only the CUDA libraries the build linked. A build without
 * CUDA has no loader to test: the program exits 77 (skipped).
 */
#include "ct_build_config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "helpers.h"

#ifdef CT_HAVE_CUDA
#include "backend/cuda_loader.h"

static void test_own_library_loads(void **state) {
    (void)state;
    char why[512] = "";
    const ct_cuda_api *api = ct_cuda_api_open(CT_BUILD_ROOT "/" CT_CUDA_LIB_NAME, why, sizeof why);
    if (!api) fail_msg("%s", why);
    assert_non_null(api->backend);
    assert_string_equal(api->backend->name, "cuda");
    assert_non_null(api->probe);
    assert_non_null(api->bench_matmul);
}

static void expect_refused(const char *path, const char *reason) {
    char why[512] = "";
    assert_null(ct_cuda_api_open(path, why, sizeof why));
    print_message("refused: %s\n", why);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, reason));
    assert_null(strchr(why, '\n'));
}

static void test_older_library_refused(void **state) {
    (void)state;
    expect_refused(CT_BUILD_ROOT "/tests/fake_cuda_old.so", "built by an older ctrain");
}

static void test_other_build_refused(void **state) {
    (void)state;
    expect_refused(CT_BUILD_ROOT "/tests/fake_cuda_other.so", "was built for another ctrain");
    char want[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)ct_cuda_abi_fingerprint());
    char why[512] = "";
    assert_null(ct_cuda_api_open(CT_BUILD_ROOT "/tests/fake_cuda_other.so", why, sizeof why));
    assert_non_null(strstr(why, want)); /* names the fingerprint this ctrain needs */
}

static void test_missing_file_refused(void **state) {
    (void)state;
    expect_refused(CT_BUILD_ROOT "/tests/no_such_library.so", "No such file");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_library_loads),
        cmocka_unit_test(test_older_library_refused),
        cmocka_unit_test(test_other_build_refused),
        cmocka_unit_test(test_missing_file_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}

#else /* no CUDA in this build */

int main(void) { return ct_test_skip("this build has no CUDA backend to load"); }

#endif
