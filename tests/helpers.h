/* helpers.h: small utilities shared by the tests (temp dirs, writing files). */
#ifndef CT_TEST_HELPERS_H
#define CT_TEST_HELPERS_H

#include <stddef.h>

/* Creates a fresh temporary directory and returns its path (static storage per
 * call site is not kept: the caller copies it). */
void ct_test_mkdtemp(char *out, size_t n);
/* Writes len bytes to path; fails the test on error. */
void ct_test_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file (malloc'd, NUL-terminated); *len gets its size. */
char *ct_test_read_file(const char *path, size_t *len);
/* Removes a directory tree (rm -rf). */
void ct_test_rmtree(const char *path);

#endif
