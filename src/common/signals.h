/* signals.h: SIGINT, SIGTERM and SIGHUP arrive in one place.
 *
 * ct_signals_start, called first thing in main, blocks the three signals in the
 * calling thread, so that every thread created after it (OpenMP's, oneDNN's, MPI's,
 * the loader's, replica ranks) has them blocked too, and starts the one thread
 * that receives them with sigwait. No signal handler ever runs, so no signal frame
 * is pushed onto a thread inside oneDNN's generated code (oneDNN 2.6 runs some with
 * its stack pointer in the heap).
 *
 * What a signal does: while a fit runs (graceful mode: in one process from when its
 * run directory is open, with several ranks the training loop), the first one is
 * recorded for the fit to poll at its next step boundary, where it saves and stops
 * (during start-up: where it stops before training, leaving nothing behind); a second one ends the process at once, as the signal's default
 * action does (a checkpoint being written is then left as it was: the previous one
 * stays, and the temporary file is removed at the next start). The same signal again
 * within 200 ms of the first is not a second one, also once the fit has stopped and
 * left graceful mode: GNU timeout and batch schedulers signal the process and then
 * its process group, so it arrives twice; a deliberate second Ctrl-C comes later, or
 * is another signal. Outside graceful mode the first signal ends the process at once.
 */
#ifndef CT_SIGNALS_H
#define CT_SIGNALS_H

#include <stdbool.h>

#include "common/error.h"

/* Blocks the signals and starts the receiving thread. Call before any other thread
 * exists. Idempotent. */
int ct_signals_start(ct_err *err);
/* Enters or leaves graceful mode. Entering forgets any earlier pending signal. */
void ct_signals_graceful(bool on);
/* The first signal received in graceful mode (SIGINT, SIGTERM, SIGHUP), or 0. */
int ct_signals_pending(void);
/* Exit status of a run stopped by signal sig: 128 + sig (130, 143, 129). */
int ct_signals_exit_status(int sig);
/* "SIGINT", "SIGTERM", "SIGHUP" (else "a signal"). */
const char *ct_signals_name(int sig);

#endif
