/* targets.h: one input through one of ctrain's readers of untrusted files. The
 * libFuzzer harnesses (libfuzzer_main.c) call these, and test_fuzz_regressions
 * replays every saved input through the same functions in the normal suite.
 *
 * The contract each target checks: the reader returns (a crash or a sanitizer
 * report is a failure by itself); when it refuses the input, its error is one
 * non-empty line that names the input, and the refusal is not for lack of memory
 * (errno ENOMEM: the inputs are small, so running out under a budget means the
 * reader allocated what the input claims rather than what it holds); when it
 * accepts, what it returns agrees with the input (sizes, names, the text kept).
 */
#ifndef CT_FUZZ_TARGETS_H
#define CT_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CT_FUZZ_ACCEPTED, /* the reader accepted the input and the result is consistent */
    CT_FUZZ_REFUSED,  /* the reader refused it with a clean error */
    CT_FUZZ_BROKEN    /* the contract is broken; why[] says how */
} ct_fuzz_result;

/* why[n] gets the reader's error, or what broke the contract. */
typedef ct_fuzz_result (*ct_fuzz_fn)(const uint8_t *data, size_t size, char *why, size_t n);

/* The input is YAML text, parsed from memory as "fuzz.yaml" (ct_config_parse, which
 * ct_config_load calls on a file's contents); an accepted config then goes through
 * the graph's shape inference (ct_graph_build), as every command does next. */
ct_fuzz_result ct_fuzz_config(const uint8_t *data, size_t size, char *why, size_t n);

/* The first byte says how the rest becomes an IDX file for ct_idx_read_u8:
 * bit 0 set, the rest is gzip-compressed first (a valid stream around fuzzed IDX
 * bytes), clear, it is the file as is (plain IDX, or a gzip stream that is itself
 * fuzzed); bit 1 set, the file is read as images (ndim 3), clear, as labels;
 * bit 2 set, the file comes through a pipe, whose size the reader cannot know,
 * clear, from a regular (in-memory) file. */
ct_fuzz_result ct_fuzz_idx(const uint8_t *data, size_t size, char *why, size_t n);

/* The input is a checkpoint file for ct_checkpoint_read. */
ct_fuzz_result ct_fuzz_checkpoint(const uint8_t *data, size_t size, char *why, size_t n);

/* The input is an image file for ct_image_read (PNG, JPEG, PGM, PPM); an accepted
 * one is converted to model inputs (ct_image_to_input). */
ct_fuzz_result ct_fuzz_image(const uint8_t *data, size_t size, char *why, size_t n);

/* The input is a list file's text for ct_image_list_parse (data.format list). */
ct_fuzz_result ct_fuzz_list(const uint8_t *data, size_t size, char *why, size_t n);

/* The first byte is a mode, the rest a data cache file (train/data_cache.h) that
 * ct_data_cache_read (mode bit 0 clear) or ct_data_cache_read_kept (set) reads for
 * the config its header names, with the fingerprint it holds; mode bit 1 set, the
 * harness first writes the right CRC-32 into the header, so that the payload's
 * checks are reached. An accepted cache must agree with its header and its size. */
ct_fuzz_result ct_fuzz_cache(const uint8_t *data, size_t size, char *why, size_t n);

/* ---- shared by the targets (target_common.c) ------------------------------ */

/* Checks a refusal against the contract above and copies its message to why;
 * errno_after is errno as the reader left it (the target sets it to 0 first). */
ct_fuzz_result ct_fuzz_refusal(const char *msg, const char *source, int errno_after, char *why,
                               size_t n);

/* Replaces the contents of this process's in-memory scratch file (memfd) with
 * data[0..size) and writes a path that opens it to path[n]. Returns -1 (why
 * filled) when that fails. */
int ct_fuzz_file(const uint8_t *data, size_t size, char *path, size_t path_n, char *why,
                 size_t n);

/* Puts data[0..size) into a new pipe, closes its write end and writes a path that
 * opens the read end to path[n]; returns the read end's descriptor, for the caller
 * to close, or -1 (why filled) when that fails (or data does not fit the pipe). */
int ct_fuzz_pipe(const uint8_t *data, size_t size, char *path, size_t path_n, char *why,
                 size_t n);

#endif
