/* fake_cuda_lib.c: stand-ins for a libctrain-cuda.so from another build, for
 * test_cuda_loader. Built twice as shared modules:
 *   fake_cuda_old.so    (no CT_FAKE_ABI): an older library, without the ABI symbol;
 *   fake_cuda_other.so  (CT_FAKE_ABI):   one whose fingerprint differs from this
 *                                        build's (its own plus one).
 * Both export an entry point returning an empty table, which the loader must never
 * call. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/cuda_api.h"

const ct_cuda_api *ct_cuda_api_entry(void);

const ct_cuda_api *ct_cuda_api_entry(void) { abort(); }

#ifdef CT_FAKE_ABI
uint64_t ct_cuda_api_abi(void);
uint64_t ct_cuda_api_abi(void) { return ct_cuda_abi_fingerprint() + 1; }
#endif
