/* test_cuda_loader.c: loading libctrain-cuda.so and its ABI check
 * (device/cuda_loader.h, backend/cuda/cuda_api.h "ABI check").
 *
 * This program does not link the CUDA backend library; it loads, through
 * ct_cuda_api_open:
 *   - the library this build made (next to ctrain): accepted, its table complete;
 *   - a library without the ABI symbol (an older build, fake_cuda_old.so) and one
 *     with another fingerprint (fake_cuda_other.so): refused with a one-line
 *     reason naming the path, before their entry point runs (it aborts);
 *   - a missing file: refused with the loader's message;
 *   - `ctrain devices` with CTRAIN_CUDA_LIB naming the other build's library:
 *     the refusal is its reason for the CUDA libraries being unavailable.
 * The files are found under CT_BUILD_ROOT (the build, or a GPU bundle made by
 * scripts/gpu-bundle.sh). Loading needs no GPU, only the CUDA libraries the build
 * linked. A build without
 * CUDA has no loader to test: the program exits 77 (skipped).
 */
#include "ct_build_config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#ifdef CT_HAVE_CUDA
#include "device/cuda_loader.h"

/* path of a file in the build (or a GPU bundle: CT_BUILD_ROOT) */
static const char *built(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", ct_test_build_root(), name);
    return path;
}

static void test_own_library_loads(void **state) {
    (void)state;
    char why[512] = "";
    const ct_cuda_api *api = ct_cuda_api_open(built(CT_CUDA_LIB_NAME), why, sizeof why);
    if (!api) fail_msg("%s", why);
    assert_non_null(api->backend);
    assert_string_equal(api->backend->name, "cuda");
    assert_non_null(api->probe);
    assert_non_null(api->bench_matmul);
}

/* path is refused in one line naming it, the reason and, when not NULL, also. */
static void expect_refused(const char *path, const char *reason, const char *also) {
    char why[512] = "";
    assert_null(ct_cuda_api_open(path, why, sizeof why));
    print_message("refused: %s\n", why);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, reason));
    if (also) assert_non_null(strstr(why, also));
    assert_null(strchr(why, '\n'));
}

static void test_older_library_refused(void **state) {
    (void)state;
    expect_refused(built("tests/fake_cuda_old.so"), "built by an older ctrain", NULL);
}

static void test_other_build_refused(void **state) {
    (void)state;
    char want[32]; /* the fingerprint this ctrain needs, which the reason names */
    snprintf(want, sizeof want, "%016llx", (unsigned long long)ct_cuda_abi_fingerprint());
    expect_refused(built("tests/fake_cuda_other.so"), "was built for another ctrain", want);
}

/* ctrain itself: `ctrain devices` loads the library even without a driver (to
 * report its versions) and shows the refusal as the reason. */
static void test_ctrain_names_the_refusal(void **state) {
    (void)state;
    char dir[512];
    ct_test_mkdtemp(dir, sizeof dir);
    setenv("CTRAIN_CUDA_LIB", built("tests/fake_cuda_other.so"), 1);
    ct_run_result r = ct_test_run(dir, "devices");
    unsetenv("CTRAIN_CUDA_LIB");
    print_message("%s", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "CUDA libraries: unavailable (cannot load the CUDA backend: "));
    assert_non_null(strstr(r.out, "was built for another ctrain"));
    ct_test_run_free(&r);
    ct_test_rmtree(dir);
}

static void test_missing_file_refused(void **state) {
    (void)state;
    expect_refused(built("tests/no_such_library.so"), "No such file", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_library_loads),
        cmocka_unit_test(test_older_library_refused),
        cmocka_unit_test(test_other_build_refused),
        cmocka_unit_test(test_missing_file_refused),
        cmocka_unit_test(test_ctrain_names_the_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}

#else /* no CUDA in this build */

int main(void) { return ct_test_skip("this build has no CUDA backend to load"); }

#endif
