/* bounded_alloc.h: running a reader under a memory budget, to show that it
 * allocates what its input holds and not what the input claims. */
#ifndef CT_TEST_BOUNDED_ALLOC_H
#define CT_TEST_BOUNDED_ALLOC_H

#include <stddef.h>

/* The code under test: returns 0 when it behaved as expected, else non-zero, with
 * a one-line account in msg[n] either way. It must not use cmocka's asserts (it
 * runs in a child process). */
typedef int (*ct_bounded_fn)(void *arg, char *msg, size_t n);

/* Runs fn(arg, msg, n) in a child process whose heap may grow by at most budget
 * bytes while fn runs, and returns fn's result; -1 (msg says why) when the child
 * died. A normal build caps the child's address space at what it had mapped plus
 * budget (RLIMIT_AS), so a larger allocation fails inside fn and fn sees it (an
 * "out of memory" error where it wanted another). An AddressSanitizer build,
 * whose shadow memory rules RLIMIT_AS out, counts the child's live heap bytes
 * through the sanitizer's allocation hooks instead and returns 1 when their peak
 * passed budget. */
int ct_test_bounded(ct_bounded_fn fn, void *arg, size_t budget, char *msg, size_t n);

#endif
