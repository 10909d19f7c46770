/*
 * libFuzzer target: the ib sender's parser of the clear-to-send entries the
 * receiver RDMA-writes into its FIFO (ferry_ib_cts_ready). Input: the
 * message number + 1 the sender waits for (8 bytes) | up to 8 entries of 64
 * bytes (a FIFO slot; zero-padded). e[0].idx is set to that number, as
 * isend only parses a slot once it does. "Ready" must mean 1..8 entries,
 * each stamped with that number.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib_comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_ib_cts_t e[FERRY_IB_MAX_RECVS];
    uint64_t want = 0;
    int n = 0, st, i;

    memset(e, 0, sizeof(e));
    memcpy(&want, data, size < sizeof(want) ? size : sizeof(want));
    if (size > sizeof(want))
        memcpy(e, data + sizeof(want),
               size - sizeof(want) < sizeof(e) ? size - sizeof(want) : sizeof(e));
    e[0].idx = want;
    st = ferry_ib_cts_ready(e, want, &n);
    if (st < 0)
        return 0;
    if (n < 1 || n > FERRY_IB_MAX_RECVS || n != (int)e[0].nreqs)
        abort(); /* A buffer count isend would index the slot with. */
    if (st == 1)
        for (i = 0; i < n; i++)
            if (e[i].idx != want)
                abort();
    return 0;
}
